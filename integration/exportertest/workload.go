// Package exportertest drives a pgreplica connector through the figures
// Stats reports (replica, primary and fallback reads, a failed replica-only
// read, waits, LSN captures, paused and lagging replicas) on a real
// cluster, for the tests of metric exporters such as pgreplicaprom and
// pgreplicaotel.
package exportertest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration"
	"github.com/pgreplica/pgreplica/integration/itest"
)

// Open returns a pgreplica *sql.DB on the cluster, pinged, and its
// connector, closed with the test, with a short wait budget and fast
// probes so the test does not wait long. The hosts get zones z0, z1, … so
// exporters show a zone label.
func Open(t testing.TB, cluster *integration.Cluster, app string) (*sql.DB, *pgreplica.Connector) {
	t.Helper()
	zones := make([]string, cluster.Len())
	for i := range zones {
		zones[i] = fmt.Sprintf("z%d", i)
	}
	dsn := cluster.DSN() + "&application_name=" + app + "&pgreplica_wait_budget=50ms" +
		"&tuning_monitor_interval=50ms&pgreplica_zones=" + strings.Join(zones, ",")
	return itest.Open(t, dsn)
}

// Run writes, reads from replicas and the primary, then pauses replay on
// every replica (resumed at cleanup) and makes one session read fall back
// and one fail.
func Run(t testing.TB, ctx context.Context, cluster *integration.Cluster, db *sql.DB, writes, replicaReads, primaryReads int) {
	t.Helper()
	tbl := fmt.Sprintf("exporter_%d", time.Now().UnixNano())
	exec := func(ctx context.Context, q string, args ...any) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(ctx, "CREATE TABLE "+tbl+" (id serial PRIMARY KEY, v text)")
	t.Cleanup(func() { db.ExecContext(context.Background(), "DROP TABLE "+tbl) })
	for i := range writes {
		exec(ctx, "INSERT INTO "+tbl+" (v) VALUES ($1)", strconv.Itoa(i))
	}
	if err := cluster.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	for range replicaReads {
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+tbl).Scan(&n); err != nil || n != writes {
			t.Fatalf("replica read: %d rows, %v", n, err)
		}
	}
	for range primaryReads {
		if err := db.QueryRowContext(pgreplica.WithPrimary(ctx), "SELECT count(*) FROM "+tbl).Scan(&n); err != nil {
			t.Fatal(err)
		}
	}

	cluster.PauseReplicas(t)
	sess := pgreplica.NewSession()
	sctx := pgreplica.WithSession(ctx, sess)
	exec(sctx, "INSERT INTO "+tbl+" (v) VALUES ('fresh')")
	exec(sctx, "INSERT INTO "+tbl+" (v) VALUES ('fresher')")
	// The end of a request: its token carries the writes' position, read
	// now. The next read knows it and waits for a replica that has it
	// (rather than going straight to the primary, as a read of a write
	// too young to have a known position does).
	_ = sess.Token()
	if err := db.QueryRowContext(sctx, "SELECT count(*) FROM "+tbl).Scan(&n); err != nil || n != writes+2 {
		t.Fatalf("session read with replay paused: %d rows, %v; want %d from the primary", n, err, writes+2)
	}
	err := db.QueryRowContext(pgreplica.WithFallback(sctx, pgreplica.FallbackError), "SELECT count(*) FROM "+tbl).Scan(&n)
	if !errors.Is(err, pgreplica.ErrNoFreshReplica) {
		t.Fatalf("replica-only session read with replay paused: %v, want ErrNoFreshReplica", err)
	}
}

// Check checks that Run left its marks in Stats.
func Check(t testing.TB, s pgreplica.Stats, primaryReads int64) {
	t.Helper()
	for _, c := range []struct {
		what      string
		got, want int64
	}{
		{"replica reads", s.ReplicaReads, 1},
		{"primary reads", s.PrimaryReads, primaryReads},
		{"fallback reads", s.FallbackReads, 1},
		{"timeout fallbacks", s.Fallbacks[pgreplica.ReasonTimeout], 1},
		{"timeout failures", s.FailedReads[pgreplica.ReasonTimeout], 1},
		{"tokened reads", s.TokenedReads, 3},
		{"tokened fallbacks", s.TokenedFallbacks, 2},
		// One capture covers every write before it: at least one ran.
		{"LSN captures", s.LSNCaptures, 1},
		{"waits", s.Wait.Count, 3},
	} {
		if c.got < c.want {
			t.Errorf("Stats: %s = %d, want >= %d", c.what, c.got, c.want)
		}
	}
	// Two reads needed a position no replica had: they looked at the
	// paused replicas (waiting out the budget only while the monitor had
	// not seen them paused yet) before they fell back or failed.
	if s.Wait.Sum <= 0 {
		t.Errorf("Stats: wait sum %v, want > 0", s.Wait.Sum)
	}
}

// AwaitPausedAndLagging waits until the monitor has seen every replica
// paused and behind, in bytes and in time, and describes them.
func AwaitPausedAndLagging(t testing.TB, ctx context.Context, cluster *integration.Cluster, c *pgreplica.Connector) []string {
	t.Helper()
	for {
		var paused []string
		ok := true
		for _, n := range c.Stats().Nodes {
			if n.Role != pgreplica.RoleReplica {
				continue
			}
			if !n.ReplayPaused || n.LagBytes == 0 || n.LagTime == 0 {
				ok = false
			}
			paused = append(paused, fmt.Sprintf("%s lag %dB %v", n.Addr, n.LagBytes, n.LagTime.Round(time.Millisecond)))
		}
		if ok && len(paused) == cluster.Len()-1 {
			return paused
		}
		select {
		case <-ctx.Done():
			t.Fatalf("replicas not seen paused and lagging: %v", paused)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
