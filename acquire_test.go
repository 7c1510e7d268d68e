package pgreplica

import (
	"context"
	"database/sql/driver"
	"fmt"
	"github.com/pgreplica/pgreplica/internal/tuning"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/DATA-DOG/go-sqlmock"

	"github.com/pgreplica/pgreplica/internal/prober"
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
	cfg := Config{knobs: tuning.Knobs{MonitorInterval: time.Hour, HealthCheckAfter: -1, HedgeDelay: 10 * time.Millisecond},
		Picker: PickerFunc(func(Candidates) int { return 0 })} // the slow replica first
	gate := make(chan struct{})
	c, _ := startMockCluster(t, cfg, func(i int, mc mockConnector) driver.Connector {
		if i == 1 {
			return gatedConnector{mc, gate}
		}
		return mc
	})
	ctx := context.Background()
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

// startMockCluster starts a connector on a primary (node 0) and two
// replicas of sqlmock connections whose probes answer at once; wrap may
// stand in for node i's connector.
func startMockCluster(t *testing.T, cfg Config, wrap func(i int, mc mockConnector) driver.Connector) (*Connector, []sqlmock.Sqlmock) {
	t.Helper()
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
	c, err := newConnector(cfg, func(_ *Config, h Host, _ string) (driver.Connector, error) {
		for i := range cfg.Hosts {
			if h.Addr == cfg.Hosts[i].Addr {
				return wrap(i, mockConnector{drv: mdrv, dsn: h.Addr}), nil
			}
		}
		return nil, fmt.Errorf("no host %s", h.Addr)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for _, n := range c.nodeList() {
		n.pool.identify = nil
	}
	sysid := 1000 + mockSysIDs.Add(1)
	c.probe = func(_ context.Context, n *node) *prober.Status {
		r := roleReplica
		if n.idx == 0 {
			r = rolePrimary
		}
		return standInAnswer(r, 0x100, sysid)
	}
	if err := c.start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c, mocks
}

// TestUnreadBoundIsNotKept: a session read that leaves its last replica
// needs a position of the primary read after that read; when none can be
// read in the wait budget, that one read cannot be proven on a replica,
// and the session keeps the watermark it had (it used to keep the
// unprovable bound for good: every later read on the primary).
func TestUnreadBoundIsNotKept(t *testing.T) {
	c, mocks := startMockCluster(t, Config{knobs: tuning.Knobs{MonitorInterval: time.Hour, HealthCheckAfter: -1}, WaitBudget: 20 * time.Millisecond},
		func(_ int, mc mockConnector) driver.Connector { return mc })
	mocks[0].MatchExpectationsInOrder(false) // the primary answers no capture
	sess := NewSession()
	ctx := WithSession(context.Background(), sess)
	var pl plan
	if err := c.planFor(ctx, stmtclass.Class{Read: true}, &pl); err != nil {
		t.Fatal(err)
	}
	before := sess.LSNFor(pl.topo.sysid)
	if err := c.boundLastRead(ctx, &pl); err != nil {
		t.Fatal(err)
	}
	if pl.need != unprovableLSN || pl.fresh != 0 {
		t.Errorf("the read needs %s, fresh replicas %v: want no replica proven", pl.need, pl.fresh)
	}
	if got := sess.LSNFor(pl.topo.sysid); got != before {
		t.Errorf("the session's watermark went from %s to %s: an unread bound was kept", before, got)
	}
}

// killedConnector refuses connections once armed, opening gate the
// first time: the server killed while another replica's pool dials.
type killedConnector struct {
	mockConnector
	armed *atomic.Bool
	once  *sync.Once
	gate  chan struct{}
}

func (r killedConnector) Connect(ctx context.Context) (driver.Conn, error) {
	if !r.armed.Load() {
		return r.mockConnector.Connect(ctx)
	}
	r.once.Do(func() { close(r.gate) })
	return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
}

// TestSlowReplicaServesWhenTheOtherIsGone: a read passes over a replica
// slow to give a connection, then finds the other one refusing: it waits
// for the slow one's connection (within the wait budget) rather than
// load the primary (TestReplicaKilled saw such a read on the primary).
func TestSlowReplicaServesWhenTheOtherIsGone(t *testing.T) {
	cfg := Config{knobs: tuning.Knobs{MonitorInterval: time.Hour, HealthCheckAfter: -1, HedgeDelay: 10 * time.Millisecond},
		Picker: PickerFunc(func(Candidates) int { return 0 })} // the slow replica first
	gate := make(chan struct{})
	var armed atomic.Bool
	c, _ := startMockCluster(t, cfg, func(i int, mc mockConnector) driver.Connector {
		switch i {
		case 1:
			return gatedConnector{mc, gate}
		case 2:
			return killedConnector{mc, &armed, new(sync.Once), gate}
		}
		return mc
	})
	armed.Store(true)
	ctx := context.Background()
	var pl plan
	if err := c.planFor(ctx, stmtclass.Class{Read: true}, &pl); err != nil {
		t.Fatal(err)
	}
	l, err := c.leaseReplica(ctx, &pl)
	if err != nil {
		t.Fatalf("the read found no replica (%v); want the slow one", err)
	}
	defer l.release(nil)
	if got := l.p.node.idx; got != 1 {
		t.Fatalf("served by node %d, want 1 (node 2 refuses)", got)
	}
}

// TestSlowReplicaThenFrozen: the first replica a read picks is slow to
// connect, the other never connects (frozen). The read waits for the
// frozen one's connection no longer than the hedge delay, since the slow
// one may still serve it, and then waits patiently for the slow one:
// served within the wait budget, not at the read's deadline.
func TestSlowReplicaThenFrozen(t *testing.T) {
	cfg := Config{knobs: tuning.Knobs{MonitorInterval: time.Hour, HealthCheckAfter: -1, HedgeDelay: 10 * time.Millisecond},
		Picker: PickerFunc(func(Candidates) int { return 0 })} // node 1 first
	slow, frozen := make(chan struct{}), make(chan struct{})
	defer close(frozen)
	c, _ := startMockCluster(t, cfg, func(i int, mc mockConnector) driver.Connector {
		switch i {
		case 1:
			return gatedConnector{mc, slow}
		case 2:
			return gatedConnector{mc, frozen}
		}
		return mc
	})
	time.AfterFunc(30*time.Millisecond, func() { close(slow) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var pl plan
	if err := c.planFor(ctx, stmtclass.Class{Read: true}, &pl); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	l, err := c.leaseReplica(ctx, &pl)
	if err != nil {
		t.Fatalf("after %v: %v", time.Since(start), err)
	}
	defer l.release(nil)
	if got := l.p.node.idx; got != 1 || time.Since(start) > time.Second {
		t.Fatalf("served by node %d after %v, want node 1 within the wait budget", got, time.Since(start))
	}
}
