package pgreplica

import (
	"context"
	"database/sql/driver"
	"fmt"
	"testing"
	"time"

	"github.com/DATA-DOG/go-sqlmock"

	"github.com/pgreplica/pgreplica/internal/stmtclass"
)

// gatedConnector connects once gate is closed: a server slow to accept.
type gatedConnector struct {
	mockConnector
	gate chan struct{}
}

func (g gatedConnector) Connect(ctx context.Context) (driver.Conn, error) {
	select {
	case <-g.gate:
		return g.mockConnector.Connect(ctx)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TestSlowReplicaIsNotTried: a read passes over a replica whose
// connection is slow to come (another replica serves it at once), but
// does not count that replica as tried: a retry of the read (a replay
// conflict on the replica that served it) may go there.
func TestSlowReplicaIsNotTried(t *testing.T) {
	cfg := Config{MonitorInterval: time.Hour, HealthCheckAfter: -1, HedgeDelay: 10 * time.Millisecond,
		Picker: PickerFunc(func(Candidates) int { return 0 })} // the slow replica first
	mdrv := func() driver.Driver { db, _, _ := sqlmock.New(); defer db.Close(); return db.Driver() }()
	var mocks []sqlmock.Sqlmock
	for i := range 3 {
		dsn := fmt.Sprintf("%s-node%d", t.Name(), i)
		db, mock, err := sqlmock.NewWithDSN(dsn, sqlmock.QueryMatcherOption(sqlmock.QueryMatcherEqual))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		mocks = append(mocks, mock)
		cfg.Hosts = append(cfg.Hosts, Host{Addr: dsn, Port: 5432})
	}
	gate := make(chan struct{})
	c, err := newConnector(cfg, func(_ *Config, h Host) (driver.Connector, error) {
		mc := mockConnector{drv: mdrv, dsn: h.Addr}
		if h.Addr == cfg.Hosts[1].Addr {
			return gatedConnector{mc, gate}, nil
		}
		return mc, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, n := range c.nodes {
		n.pool.identify = nil
	}
	sysid := 1000 + mockSysIDs.Add(1)
	c.probe = func(_ context.Context, n *node) *nodeStatus {
		r := roleReplica
		if n.idx == 0 {
			r = rolePrimary
		}
		return &nodeStatus{role: r, lsn: 0x100, timeline: 1, sysid: sysid, at: time.Now()}
	}
	ctx := context.Background()
	if err := c.start(ctx); err != nil {
		t.Fatal(err)
	}
	var pl plan
	if err := c.planFor(ctx, stmtclass.Class{Read: true}, &pl); err != nil {
		t.Fatal(err)
	}
	l, err := c.leaseReplica(ctx, &pl)
	if err != nil {
		t.Fatal(err)
	}
	defer l.release(nil)
	if got := l.p.node.idx; got != 2 {
		t.Fatalf("served by node %d, want 2 (node 1 is slow to connect)", got)
	}
	if pl.tried.has(1) {
		t.Error("the slow replica counts as tried: a retry of the read could not use it")
	}
	if set := pl.replicas(false); !set.has(1) {
		t.Errorf("replicas a retry may use: %v, want node 1 among them", set)
	}
	close(gate)
}
