package topologytest

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
)

// TestInFlightWriteNotRetried: the server session running a write is
// terminated (FATAL 57P01, as in a fast shutdown or a failover) while the
// primary stays up. The caller gets an error saying the outcome is unknown,
// and the write ran exactly once: neither the driver nor database/sql
// (which re-runs a statement whose driver returned driver.ErrBadConn) may
// send it again. A sequence counts the executions, since nextval is not
// rolled back with the terminated statement.
func TestInFlightWriteNotRetried(t *testing.T) {
	for _, inner := range []string{"pgx", "pq"} {
		t.Run(inner, func(t *testing.T) {
			db, _ := open(t, cluster, "pgreplica_driver="+inner)
			ctx := testCtx(t, 30*time.Second)
			tbl := newTable(t, cluster)
			seq := fmt.Sprintf("topo_runs_%d_%s", os.Getpid(), inner)
			if err := cluster.Exec(ctx, 0, "CREATE SEQUENCE "+seq); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cluster.Exec(ctx, 0, "DROP SEQUENCE IF EXISTS "+seq) })

			errc := make(chan error, 1)
			go func() {
				// LATERAL makes nextval run before the sleep.
				_, err := db.ExecContext(ctx, fmt.Sprintf("INSERT INTO %s (seq) SELECT r.n FROM (SELECT nextval('%s') AS n OFFSET 0) r, "+
					"LATERAL (SELECT pg_sleep(2) WHERE r.n IS NOT NULL) z", tbl, seq))
				errc <- err
			}()
			const running = "FROM pg_stat_activity WHERE application_name = $1 AND state = 'active' AND query LIKE 'INSERT%pg_sleep(2)%' AND wait_event = 'PgSleep'"
			wctx, cancel := within(ctx, 10*time.Second)
			defer cancel()
			if err := waitFor(wctx, "the write to run", func() (bool, string) {
				s, err := cluster.QueryString(wctx, 0, "SELECT count(*) "+running, appName(t))
				return err == nil && s == "1", fmt.Sprintf("%q, %v", s, err)
			}); err != nil {
				t.Fatal(err)
			}
			if err := cluster.Exec(ctx, 0, "SELECT pg_terminate_backend(pid) "+running, appName(t)); err != nil {
				t.Fatal(err)
			}
			var err error
			select {
			case err = <-errc:
			case <-time.After(10 * time.Second):
				t.Fatal("the write did not return within 10s of its session's termination")
			}
			runs := mustQuery(t, cluster, 0, "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM "+seq)
			rows := mustQuery(t, cluster, 0, "SELECT count(*) FROM "+tbl)
			t.Logf("%s: write returned %v; it ran %s time(s), %s row(s) stored", inner, err, runs, rows)
			if runs != "1" {
				t.Errorf("the write ran %s times: it was retried after its connection was lost mid-statement", runs)
			}
			if !errors.Is(err, pgreplica.ErrWriteOutcomeUnknown) {
				t.Errorf("the caller got %v; want an error wrapping ErrWriteOutcomeUnknown", err)
			}
		})
	}
}
