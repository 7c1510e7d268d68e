package drivertest

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration/itest"
)

// TestReadYourWritesWithPausedReplicas: a write through context.Background
// is seen by the very next read while replay is paused everywhere (the
// primary serves it after the wait budget), and by a replica once replay
// resumes. Run for both inner drivers and both commit modes.
func TestReadYourWritesWithPausedReplicas(t *testing.T) {
	for _, inner := range drivers {
		for _, async := range []bool{false, true} {
			name := inner + "/sync"
			if async {
				name = inner + "/async"
			}
			t.Run(name, func(t *testing.T) {
				db := open(t, inner)
				ctx := ctxFor(t)
				tbl := table(t, db)
				cn, err := db.Conn(ctx) // one conn so SET sticks (it pins)
				if err != nil {
					t.Fatal(err)
				}
				defer cn.Close()
				if async {
					if _, err := cn.ExecContext(ctx, "SET synchronous_commit = off"); err != nil {
						t.Fatal(err)
					}
				}
				if err := cluster.WaitCaughtUp(ctx); err != nil {
					t.Fatal(err)
				}
				resume := cluster.PauseReplicas(t)
				if _, err := cn.ExecContext(ctx, "INSERT INTO "+tbl+" (v) VALUES ($1)", "fresh"); err != nil {
					t.Fatal(err)
				}
				var v string
				var port int
				q := "SELECT v, inet_server_port() FROM " + tbl + " WHERE v = 'fresh'"
				if err := db.QueryRowContext(context.Background(), q).Scan(&v, &port); err != nil {
					t.Fatalf("read after write with replay paused: %v", err)
				}
				if n := nodeOf(t, port); n != cluster.Primary() {
					t.Fatalf("served by node %d with replay paused; only the primary has the row", n)
				}
				// Replica only: a clear error, not stale data.
				err = db.QueryRowContext(pgreplica.WithFallback(ctx, pgreplica.FallbackError), q).Scan(&v, &port)
				if !errors.Is(err, pgreplica.ErrNoFreshReplica) {
					t.Fatalf("replica-only read with replay paused: %v, want ErrNoFreshReplica", err)
				}
				resume()
				if err := db.QueryRowContext(context.Background(), q).Scan(&v, &port); err != nil {
					t.Fatal(err)
				}
				if n := nodeOf(t, port); n == cluster.Primary() {
					t.Fatalf("after resume the read still went to the primary")
				}
			})
		}
	}
}

// TestTokenAcrossDBs: a session token carried as a string from one *sql.DB
// to another gives the second read-your-writes. The consumer stands for
// another process: two *sql.DB of one process share the process
// watermark (TestProcessDefaultSpansDBs), so it opts out of it.
func TestTokenAcrossDBs(t *testing.T) {
	for _, inner := range drivers {
		t.Run(inner, func(t *testing.T) {
			producer := open(t, inner)
			consumer := open(t, inner, "pgreplica_consistency=eventual")
			ctx := ctxFor(t)
			tbl := table(t, producer)
			if err := cluster.WaitCaughtUp(ctx); err != nil {
				t.Fatal(err)
			}
			resume := cluster.PauseReplicas(t)

			sess := pgreplica.NewSession()
			var id int
			if err := producer.QueryRowContext(pgreplica.WithSession(ctx, sess),
				"INSERT INTO "+tbl+" (v) VALUES ('job') RETURNING id").Scan(&id); err != nil {
				t.Fatal(err)
			}
			token := sess.Token()
			if sess.LSN() == 0 || token == "" {
				t.Fatalf("the write did not advance the session: %q", token)
			}

			parsed, err := pgreplica.ParseToken(token)
			if err != nil {
				t.Fatal(err)
			}
			wctx := pgreplica.WithToken(ctx, parsed)
			var v string
			var port int
			q := "SELECT v, inet_server_port() FROM " + tbl + " WHERE id = $1"
			if err := consumer.QueryRowContext(wctx, q, id).Scan(&v, &port); err != nil {
				t.Fatalf("consumer read with the token, replay paused: %v", err)
			}
			if nodeOf(t, port) != cluster.Primary() {
				t.Fatal("served by a paused replica")
			}
			// Without the token the consumer (which wrote nothing) reads a
			// replica and does not see the row: the token is what carries
			// the guarantee.
			if err := consumer.QueryRowContext(ctx, q, id).Scan(&v, &port); !errors.Is(err, sql.ErrNoRows) {
				t.Fatalf("untokened read with replay paused: %v, want no rows from a replica", err)
			}
			resume()
			if err := consumer.QueryRowContext(wctx, q, id).Scan(&v, &port); err != nil {
				t.Fatal(err)
			}
			if nodeOf(t, port) == cluster.Primary() {
				t.Fatal("after resume the tokened read still went to the primary")
			}
		})
	}
}

// TestCommitCapture: a read-write transaction's commit raises the session
// watermark, read after the commit.
func TestCommitCapture(t *testing.T) {
	for _, inner := range drivers {
		t.Run(inner, func(t *testing.T) {
			db := open(t, inner)
			ctx := ctxFor(t)
			tbl := table(t, db)
			cluster.PauseReplicas(t)
			sess := pgreplica.NewSession()
			sctx := pgreplica.WithSession(ctx, sess)
			tx, err := db.BeginTx(sctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.ExecContext(sctx, "INSERT INTO "+tbl+" (v) VALUES ('tx')"); err != nil {
				t.Fatal(err)
			}
			if sess.LSN() != 0 {
				t.Fatal("the watermark rose before Commit")
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			if sess.LSN() == 0 {
				t.Fatal("Commit did not raise the watermark")
			}
			var n int
			if err := db.QueryRowContext(sctx, "SELECT count(*) FROM "+tbl).Scan(&n); err != nil || n != 1 {
				t.Fatalf("read after commit: %d, %v", n, err)
			}
			// A read-only transaction with the session also sees it.
			rtx, err := db.BeginTx(sctx, &sql.TxOptions{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			if err := rtx.QueryRowContext(sctx, "SELECT count(*) FROM "+tbl).Scan(&n); err != nil || n != 1 {
				t.Fatalf("read-only tx after commit: %d, %v", n, err)
			}
			rtx.Commit()
		})
	}
}

// TestReadAfterOwnWriteOnAReplica: under the defaults (pgx inside,
// process consistency), a read of the process's
// own write, whose position nobody read yet, goes to a caught-up replica
// that has replayed it (the position is read beside the read's flight)
// and sees it. A read sent right after its write finds the replicas a
// moment behind now and then: it flies once more and then goes to the
// primary, never waiting for a replica. The primary serves such reads
// at once only when every replica is predicted to replay the write later
// than the primary would answer (a replica applying 500 ms late).
func TestReadAfterOwnWriteOnAReplica(t *testing.T) {
	db := open(t, "pgx")
	ctx := ctxFor(t)
	tbl := table(t, db)
	c, err := pgreplica.ConnectorOf(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	// readBack writes n rows, each read back at once; with replayed, once
	// every replica has replayed it (the cluster's own check, which the
	// connector does not see).
	readBack := func(n int, replayed bool) (onReplicas int) {
		t.Helper()
		for i := range n {
			var id int
			if err := db.QueryRowContext(ctx, "INSERT INTO "+tbl+" (v) VALUES ($1) RETURNING id", itoa(i)).Scan(&id); err != nil {
				t.Fatal(err)
			}
			if replayed {
				if err := cluster.WaitCaughtUp(ctx); err != nil {
					t.Fatal(err)
				}
			}
			var v string
			var port int
			if err := db.QueryRowContext(ctx, "SELECT v, inet_server_port() FROM "+tbl+" WHERE id = $1", id).Scan(&v, &port); err != nil {
				t.Fatalf("read %d: %v", i, err)
			}
			if v != itoa(i) {
				t.Fatalf("read %q after writing %q", v, itoa(i))
			}
			if nodeOf(t, port) != cluster.Primary() {
				onReplicas++
			}
		}
		return onReplicas
	}
	const n = 40
	before := c.Stats()
	if got := readBack(n, true); got < n*9/10 {
		t.Errorf("%d of %d reads of replayed writes ran on replicas, want at least 90%% (stats %+v)", got, n, c.Stats())
	}
	if sent := c.Stats().RecentWriteReads - before.RecentWriteReads; sent > n/10 {
		t.Errorf("%d of %d reads of replayed writes sent to the primary for a recent write", sent, n)
	}
	before = c.Stats()
	got := readBack(n, false)
	st := c.Stats()
	t.Logf("right after their writes: %d of %d reads on replicas, %d on the primary, %d checks in flight, %d before a read",
		got, n, st.RecentWriteReads-before.RecentWriteReads, st.FlightChecks-before.FlightChecks, st.ReplayChecks-before.ReplayChecks)
	if waits := st.ReplayChecks - before.ReplayChecks; waits != 0 {
		t.Errorf("%d replay checks before a read: a read right after its write waited for a replica", waits)
	}
	if sent := st.RecentWriteReads - before.RecentWriteReads; got+int(sent) != n {
		t.Errorf("%d reads on replicas and %d sent to the primary for their write, of %d", got, sent, n)
	}

	// Both replicas apply 500 ms late: the primary answers sooner.
	for i := range cluster.Len() {
		if i == cluster.Primary() {
			continue
		}
		itest.SetApplyDelay(t, cluster, i, 500*time.Millisecond)
	}
	// The monitor reads recovery_min_apply_delay with its next probe of
	// each replica.
	set := time.Now()
	for _, ns := range c.Nodes() {
		for ns.Role == pgreplica.RoleReplica && !ns.Sampled.After(set) {
			select {
			case <-ctx.Done():
				t.Fatal("no probe after the apply delay was set")
			case <-time.After(10 * time.Millisecond):
			}
			for _, now := range c.Nodes() {
				if now.Addr == ns.Addr {
					ns = now
				}
			}
		}
	}
	beforeLate := c.Stats()
	if got := readBack(10, false); got != 0 {
		t.Errorf("%d of 10 reads after their writes ran on replicas applying 500 ms late", got)
	}
	// Each goes to the primary for its write; on a loaded machine a probe
	// of the primary may have read the write's position first, and the
	// read then falls back at once, the replicas predicted to replay it
	// past the wait budget.
	late := c.Stats()
	sent, fell := late.RecentWriteReads-beforeLate.RecentWriteReads, late.FallbackReads-beforeLate.FallbackReads
	if sent+fell != 10 || late.ReplayChecks != beforeLate.ReplayChecks {
		t.Errorf("%d of 10 reads sent to the primary for a recent write, %d fell back, %d replay checks before a read: want all on the primary at once",
			sent, fell, late.ReplayChecks-beforeLate.ReplayChecks)
	}
}

// TestReadAfterOwnWriteNotAwaited: both replicas' replay paused where the
// monitor does not see it (it probes once an hour), so the monitor's
// figures send the first reads of the process's own write to a replica,
// whose check in the read's own flight finds it behind; the flights learn
// so (flightages.go), and once every replica's have, the reads of such
// young writes fly no more. By default ("primary") a read goes to the
// primary at once after its flight, or without one: it neither waits for
// a replica (no replay check before a read, no wait) nor falls back.
// With the test-only knob WaitAfterWrite ("replica") it waits for a
// replica, and falls back when the wait budget ends.
func TestReadAfterOwnWriteNotAwaited(t *testing.T) {
	for _, tc := range []struct {
		name string
		wait bool // tuning.Knobs.WaitAfterWrite
	}{{"primary", false}, {"replica", true}} {
		t.Run(tc.name, func(t *testing.T) {
			db := open(t, "pgx", "tuning_monitor_interval=1h", "tuning_idle_monitor_interval=1h",
				"tuning_wait_after_write="+strconv.FormatBool(tc.wait), "pgreplica_wait_budget=100ms")
			ctx := ctxFor(t)
			tbl := table(t, db)
			// The replicas have the table: the reads can be described there.
			if err := cluster.WaitCaughtUp(ctx); err != nil {
				t.Fatal(err)
			}
			resume := cluster.PauseReplicas(t)
			defer resume()
			before := statsOf(t, db)
			const n = 5
			for i := range n {
				var id int
				if err := db.QueryRowContext(ctx, "INSERT INTO "+tbl+" (v) VALUES ($1) RETURNING id", itoa(i)).Scan(&id); err != nil {
					t.Fatal(err)
				}
				var v string
				var port int
				if err := db.QueryRowContext(ctx, "SELECT v, inet_server_port() FROM "+tbl+" WHERE id = $1", id).Scan(&v, &port); err != nil {
					t.Fatalf("read %d: %v", i, err)
				}
				if v != itoa(i) || nodeOf(t, port) != cluster.Primary() {
					t.Fatalf("read %q on node %d after writing %q with replay paused", v, nodeOf(t, port), itoa(i))
				}
			}
			st := statsOf(t, db)
			recent, fell, checks, flights := st.RecentWriteReads-before.RecentWriteReads, st.FallbackReads-before.FallbackReads,
				st.ReplayChecks-before.ReplayChecks, st.FlightChecks-before.FlightChecks
			t.Logf("%d reads: %d on the primary for their write, %d fell back, %d checks before a read, %d in flight", n, recent, fell, checks, flights)
			if flights == 0 || flights >= 2*n {
				t.Errorf("%d checks in the reads' flights, want the first read's, and fewer than two a read once the flights learned the replicas are behind", flights)
			}
			if !tc.wait {
				// A read planned more than captureDelay after its write
				// (a loaded machine: CI runs the packages in parallel)
				// finds the position already read by the background
				// capture, when another test of the process used a
				// Session: after the flight that found the replica behind
				// it is a fallback, not a read for a recent write, and it
				// costs the same. Never a wait.
				if recent+fell != n || recent == 0 || checks != 0 {
					t.Errorf("want every read on the primary after its flight, for its write (or, planned late, as a fallback), none waiting")
				}
			} else if recent != 0 || fell != n || checks == 0 {
				t.Errorf("want every read to wait for a replica and fall back")
			}
		})
	}
}

// TestReplicaOnlyHandleSeesTheProcessWrites: a handle given only the
// replicas' addresses serves reads that must see what the process wrote
// through its other handle (the writer's connector reads the position),
// and none of them waits out its budget at a WAL page boundary: writes
// that commit asynchronously (pg_notify changes no data) leave the
// primary's flush position on a boundary inside a record, which the
// replicas pass only at the next flush, up to wal_writer_delay later
// (before: about one read in fifty failed, "no replica replayed 0/4002000
// ... best seen 0/4001FE0").
func TestReplicaOnlyHandleSeesTheProcessWrites(t *testing.T) {
	ctx := ctxFor(t)
	w := open(t, "pgx")
	tbl := table(t, w)
	r, err := sql.Open("pgreplica", "postgres://postgres@127.0.0.1:"+itoa(cluster.Port(1))+",127.0.0.1:"+itoa(cluster.Port(2))+
		"/postgres?sslmode=disable&application_name="+appName(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close() // Ping would say there is no primary: the first read starts it
	stats, err := pgreplica.ConnectorOf(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 { // a WAL page in 200 writes
		if _, err := w.ExecContext(ctx, "SELECT pg_notify('x', '')"); err != nil {
			t.Fatal(err)
		}
		var one int
		if err := r.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
			t.Fatalf("read %d after a write of the process: %v", i, err)
		}
	}
	if _, err := w.ExecContext(ctx, "INSERT INTO "+tbl+" (v) VALUES ('seen')"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := r.QueryRowContext(ctx, "SELECT count(*) FROM "+tbl).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the replica-only handle read %d rows (%v), want the 1 the process wrote", n, err)
	}
	if st := stats.Stats(); st.ReplayChecks == 0 && st.FlightChecks == 0 {
		t.Errorf("the replica-only handle proved no read fresh: %+v", st)
	}
}
