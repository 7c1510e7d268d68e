//go:build linux

package patronitest

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration/itest"
	"github.com/pgreplica/pgreplica/integration/patroni"
)

// TestPatroniMembersFollowed: a handle given a Patroni cluster by its
// REST API (PatroniLookup, one name, no member address) reads on every
// replica; a member added while it runs takes reads without a restart;
// a member removed leaves its view, and no statement fails for it.
func TestPatroniMembersFollowed(t *testing.T) {
	c := patroni.New(t, patroni.Options{})
	ctx := itest.Ctx(t, 4*time.Minute)
	if _, err := c.WaitHealthy(ctx, 2); err != nil {
		t.Fatal(err)
	}
	var urls []string
	for _, i := range c.Live() {
		urls = append(urls, c.RESTAddr(i))
	}
	cfg, err := itest.ParseDSN(c.DSN() + "&application_name=discovery&tuning_monitor_interval=50ms")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Hosts = []pgreplica.Host{{Addr: "patroni-members"}}
	cfg.LookupFunc = pgreplica.PatroniLookup("patroni-members", urls...)
	db, cn := itest.OpenConfig(t, cfg)
	rctx := pgreplica.WithEventual(ctx)

	// readsReach reads until member i served one, within 30 s (the
	// members are asked every 2 s; a new one is probed before it serves).
	readsReach := func(i int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			m, err := servedBy(rctx, db, c)
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			if m == i {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no read reached m%d in 30 s; the handle sees %s", i, nodes(cn))
			}
		}
	}
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var replicas []int
	for _, i := range c.Live() {
		if i != leader {
			replicas = append(replicas, i)
			readsReach(i)
		}
	}

	added, err := c.AddMember(ctx)
	if err != nil {
		t.Fatal(err)
	}
	readsReach(added)

	removed := replicas[0]
	gone := c.Addr(removed)
	if err := c.RemoveMember(ctx, removed); err != nil {
		t.Fatal(err)
	}
	if err := itest.WaitFor(ctx, "the removed member to leave the handle's view", func() (bool, string) {
		s := nodes(cn)
		return !slices.ContainsFunc(cn.Nodes(), func(n pgreplica.NodeStatus) bool { return n.Address == gone }), s
	}); err != nil {
		t.Fatal(err)
	}
	for range 50 {
		if _, err := servedBy(rctx, db, c); err != nil {
			t.Fatalf("read after the removal: %v", err)
		}
	}
	if _, err := db.ExecContext(ctx, "SELECT pg_logical_emit_message(false, 'discovery', 'x')"); err != nil {
		t.Fatalf("write: %v", err)
	}
	t.Logf("followed: %s", nodes(cn))
}

// servedBy is the member that answered a read through db.
func servedBy(ctx context.Context, db *sql.DB, c *patroni.Cluster) (int, error) {
	var port int
	if err := db.QueryRowContext(ctx, "SELECT inet_server_port()").Scan(&port); err != nil {
		return -1, err
	}
	return c.NodeAt(port), nil
}

// nodes is the handle's view in one line.
func nodes(cn *pgreplica.Connector) string {
	s := ""
	for _, n := range cn.Nodes() {
		s += fmt.Sprintf("[%s %s reads=%v] ", n.Address, n.Role, n.Reads)
	}
	return s
}
