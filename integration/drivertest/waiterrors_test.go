package drivertest

import (
	"context"
	"database/sql"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
)

// Errors that say what to do: a read that waits out its context while
// the router waits on its behalf (in the fallback queue, for a replica to
// catch up, for a connection) says what it waited for, how long, which
// replica came closest and what ended the wait, and matches the
// context's error (docs/errors.md).

// TestFallbackQueueWaitedOut: with one fallback slot (half a pool of two
// on the primary), held by a read-only transaction that fell back, a
// read that must also fall back queues until its deadline:
// ErrFallbackLimit and context.DeadlineExceeded, the message naming the
// slot, the wait, and why it fell back (the paused replicas, the closest
// one named).
func TestFallbackQueueWaitedOut(t *testing.T) {
	for _, inner := range drivers {
		t.Run(inner, func(t *testing.T) {
			db := open(t, inner, "pgreplica_max_conns_per_host=2")
			ctx := ctxFor(t)
			tbl := table(t, db)
			cluster.PauseReplicas(t)
			awaitPaused(t, db, true)
			if _, err := db.ExecContext(ctx, "INSERT INTO "+tbl+" (v) VALUES ('x')"); err != nil {
				t.Fatal(err)
			}
			holder, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true}) // falls back: holds the slot
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Rollback()
			rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			var v string
			err = db.QueryRowContext(rctx, "SELECT v FROM "+tbl).Scan(&v)
			t.Logf("%s: %v", inner, err)
			if !errors.Is(err, pgreplica.ErrFallbackLimit) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, pgreplica.ErrNoFreshReplica) {
				t.Fatalf("%v: want ErrFallbackLimit and context.DeadlineExceeded (and not ErrNoFreshReplica)", err)
			}
			want := regexp.MustCompile(`^pgreplica: too many reads falling back to the primary: waited [0-9]+ms for one of the 1 fallback slots on the primary \(half of pgreplica_max_conns_per_host\), all held, until the context's deadline; ` +
				`it fell back because no replica fresh enough: .*closest 127\.0\.0\.1:[0-9]+ at [0-9A-F]+/[0-9A-F]+ \([0-9]+ bytes behind, lag [^,]+ at its last probe, replay paused\).*: context deadline exceeded$`)
			if !want.MatchString(err.Error()) {
				t.Errorf("%q does not match %s", err, want)
			}
			if n := openStats(t, db).FallbackRejected; n != 1 {
				t.Errorf("FallbackRejected = %d, want 1", n)
			}
		})
	}
}

// TestReplicaWaitWaitedOut: a read that must see a write waits for a
// replica (its replay paused where the monitor, probing once an hour, has
// not seen it) until its deadline, the budget being longer: with
// FallbackError, ErrNoFreshReplica and context.DeadlineExceeded, naming
// the position, the wait and the closest replica.
func TestReplicaWaitWaitedOut(t *testing.T) {
	for _, inner := range drivers {
		t.Run(inner, func(t *testing.T) {
			db := open(t, inner, "tuning_monitor_interval=1h", "tuning_idle_monitor_interval=1h",
				"tuning_wait_after_write=true", "pgreplica_wait_budget=5s")
			ctx := ctxFor(t)
			tbl := table(t, db)
			if err := cluster.WaitCaughtUp(ctx); err != nil {
				t.Fatal(err)
			}
			var one int
			if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil { // probed: replaying
				t.Fatal(err)
			}
			cluster.PauseReplicas(t)
			if _, err := db.ExecContext(ctx, "INSERT INTO "+tbl+" (v) VALUES ('x')"); err != nil {
				t.Fatal(err)
			}
			rctx, cancel := context.WithTimeout(pgreplica.WithFallback(ctx, pgreplica.FallbackError), 300*time.Millisecond)
			defer cancel()
			var v string
			err := db.QueryRowContext(rctx, "SELECT v FROM "+tbl).Scan(&v)
			t.Logf("%s: %v", inner, err)
			var nf *pgreplica.NoFreshReplicaError
			if !errors.As(err, &nf) || nf.Reason != pgreplica.ReasonTimeout || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%v: want a *NoFreshReplicaError (timeout) matching context.DeadlineExceeded", err)
			}
			want := regexp.MustCompile(`^pgreplica: no replica fresh enough: waited [0-9]+ms for a replica to replay [0-9A-F]+/[0-9A-F]+, until the context's deadline; ` +
				`closest 127\.0\.0\.1:[0-9]+ at [0-9A-F]+/[0-9A-F]+ \([0-9]+ bytes behind, lag [^)]+ at its last probe\): context deadline exceeded$`)
			if !want.MatchString(err.Error()) {
				t.Errorf("%q does not match %s", err, want)
			}
		})
	}
}

// TestConnectionWaitWaitedOut: a write that waits for the primary's only
// connection, held by a transaction, until its deadline names the host,
// the pool's bound and the wait, and matches context.DeadlineExceeded.
func TestConnectionWaitWaitedOut(t *testing.T) {
	for _, inner := range drivers {
		t.Run(inner, func(t *testing.T) {
			db := open(t, inner, "pgreplica_max_conns_per_host=1")
			ctx := ctxFor(t)
			tbl := table(t, db)
			holder, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Rollback()
			if _, err := holder.ExecContext(ctx, "INSERT INTO "+tbl+" (v) VALUES ('held')"); err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			_, err = db.ExecContext(wctx, "INSERT INTO "+tbl+" (v) VALUES ('x')")
			t.Logf("%s: %v", inner, err)
			want := regexp.MustCompile(`^pgreplica: waited [0-9]+ms for a connection to 127\.0\.0\.1:[0-9]+ \(1 of pgreplica_max_conns_per_host 1 in use, 0 being made\), until its context ended: context deadline exceeded$`)
			if err == nil || !want.MatchString(err.Error()) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%v: want it to match %s and context.DeadlineExceeded", err, want)
			}
		})
	}
}

// openStats returns the Stats of db's connector.
func openStats(t *testing.T, db *sql.DB) pgreplica.Stats {
	t.Helper()
	c, err := pgreplica.ConnectorOf(ctxFor(t), db)
	if err != nil {
		t.Fatal(err)
	}
	return c.Stats()
}
