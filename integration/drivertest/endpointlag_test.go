package drivertest

import (
	"strconv"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica/integration/itest"
)

// TestLaggingEndpointFallsBackAtOnce: behind a reader endpoint whose
// servers both apply 2 s late, a read of the process's own write goes to
// the primary without waiting for a replica, once reads have looked at
// both servers. Before, the probe's one server could not speak for the
// other, and every such read checked connection after connection until
// its wait budget ran out (behind HAProxy, 0.11× the throughput through
// PgBouncer per node).
func TestLaggingEndpointFallsBackAtOnce(t *testing.T) {
	ep := cluster.ReaderEndpoint(t)
	for _, inner := range drivers {
		t.Run(inner, func(t *testing.T) {
			ctx := ctxFor(t)
			db, c := openShape(t, inner, []string{primaryAddr(), ep.Addr()}, "tuning_monitor_interval=50ms")
			tbl := table(t, db)
			if _, err := db.ExecContext(ctx, "INSERT INTO "+tbl+" (id, v) VALUES (1, '0')"); err != nil {
				t.Fatal(err)
			}
			if err := cluster.WaitCaughtUp(ctx); err != nil {
				t.Fatal(err)
			}
			holdReads(t, db, 4) // connections to both servers
			for i := range cluster.Len() {
				if i != cluster.Primary() {
					itest.SetApplyDelay(t, cluster, i, 2*time.Second)
				}
			}
			// waitedOut: the read waited for a replica for half its wait
			// budget (150 ms) or more; a read predicted to wait in vain
			// waits microseconds.
			writeRead := func(v int) (waitedOut bool) {
				t.Helper()
				before := c.Stats()
				if _, err := db.ExecContext(ctx, "UPDATE "+tbl+" SET v = $1 WHERE id = 1", strconv.Itoa(v)); err != nil {
					t.Fatal(err)
				}
				var got int
				if err := db.QueryRowContext(ctx, "SELECT v::int FROM "+tbl+" WHERE id = 1").Scan(&got); err != nil {
					t.Fatal(err)
				}
				if got != v {
					t.Fatalf("read %d after writing %d", got, v)
				}
				return c.Stats().Wait.Sum-before.Wait.Sum >= 75*time.Millisecond
			}
			// The first reads look at the servers (and wait): a server
			// not looked at recently may have the write.
			for v := 1; v <= 3; v++ {
				writeRead(v)
			}
			waited := 0
			for v := 4; v < 14; v++ {
				if writeRead(v) {
					waited++
				}
			}
			if waited > 2 {
				t.Errorf("%d of 10 reads after a write waited for a replica behind an endpoint whose servers apply 2 s late, want at most 2: %+v", waited, c.Nodes()[1].Servers)
			}
		})
	}
}
