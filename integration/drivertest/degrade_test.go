package drivertest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration"
)

// Degrade, never fail: the bad minutes of a replicated cluster (a lag
// spike, a paused replica, replay conflicts, the primary's pooler
// restarting) cost latency or load on the primary, not errors, while the
// primary can answer.

// TestLagSpikeQueuesFallbacks: both replicas' replay paused for 3 s while
// 48 goroutines read a row written meanwhile, with the default consistency
// and a 5 s deadline each. No read fails: each falls back at once (a
// paused replica cannot serve the position) and queues for one of the
// fallback slots, half the primary's pool, which never hold more reads
// than that bound (on the primary: counted in pg_stat_activity as well
// as by the connector).
func TestLagSpikeQueuesFallbacks(t *testing.T) {
	const readers, bound = 48, 5
	db := open(t, "pgx", "pgreplica_max_conns_per_host="+strconv.Itoa(2*bound))
	ctx := ctxFor(t)
	tbl := table(t, db)
	resume := cluster.PauseReplicas(t)
	awaitPaused(t, db, true)
	// Written with replay paused: no replica has it until the spike ends.
	if _, err := db.ExecContext(ctx, "INSERT INTO "+tbl+" (v) VALUES ('spike')"); err != nil {
		t.Fatal(err)
	}

	// Each read holds its slot 5 ms, so that the primary's activity
	// shows how many run at once.
	q := "SELECT v, pg_sleep(0.005)::text FROM " + tbl + " WHERE v = 'spike'"
	var reads, failed atomic.Int64
	var firstErr atomic.Value
	stop := loop(readers, func(int) {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var v, slept string
		err := db.QueryRowContext(rctx, q).Scan(&v, &slept)
		cancel()
		reads.Add(1)
		if err != nil {
			failed.Add(1)
			firstErr.CompareAndSwap(nil, err)
		}
	})
	peak := 0
	spike := time.Now()
	for time.Since(spike) < 3*time.Second {
		s, err := cluster.QueryString(ctx, cluster.Primary(), "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND state = 'active' AND query LIKE 'SELECT v, pg_sleep%'", appName(t))
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(s)
		peak = max(peak, n)
	}
	stop()
	resume()

	st := statsOf(t, db)
	t.Logf("%d reads in the spike, %d failed; %d fallbacks, peak %d on the primary's activity, %d by the connector (bound %d)",
		reads.Load(), failed.Load(), st.FallbackReads, peak, st.FallbackPeak, bound)
	if failed.Load() != 0 {
		t.Errorf("%d of %d reads failed in the lag spike, first: %v", failed.Load(), reads.Load(), firstErr.Load())
	}
	if peak > bound || st.FallbackPeak > bound {
		t.Errorf("fallbacks at once: %d in pg_stat_activity, %d by the connector; the bound is %d", peak, st.FallbackPeak, bound)
	}
	if st.FallbackReads < int64(readers) {
		t.Errorf("%d fallback reads, want at least one per reader: the spike was not felt", st.FallbackReads)
	}
}

// TestPausedReplicaDoesNotStallReads: replica 1 paused, replica 2 applies
// 200 ms late (beyond the 150 ms wait budget): a read right after a write
// goes to the primary at once, as it does with no replica paused, instead
// of waiting out the budget for the paused one.
func TestPausedReplicaDoesNotStallReads(t *testing.T) {
	db := open(t, "pgx")
	ctx := ctxFor(t)
	tbl := table(t, db)
	reps := replicaNodes()
	if err := cluster.SetApplyDelay(ctx, reps[1], 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.SetApplyDelay(context.Background(), reps[1], 0) })
	if err := cluster.PauseReplay(ctx, reps[0]); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.ResumeReplay(context.Background(), reps[0]) })
	awaitNodePaused(t, db, cluster.Port(reps[0]))

	var took []time.Duration
	for i := range 10 {
		if _, err := db.ExecContext(ctx, "INSERT INTO "+tbl+" (v) VALUES ($1)", itoa(i)); err != nil {
			t.Fatal(err)
		}
		// Old enough to be read back by position, not sent to the
		// primary as too young for any replica.
		time.Sleep(20 * time.Millisecond)
		began := time.Now()
		var port int
		if err := db.QueryRowContext(ctx, "SELECT inet_server_port() FROM "+tbl+" WHERE v = $1", itoa(i)).Scan(&port); err != nil {
			t.Fatal(err)
		}
		took = append(took, time.Since(began))
		if n := nodeOf(t, port); n != cluster.Primary() {
			t.Fatalf("read %d served by node %d; only the primary has the row in time", i, n)
		}
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	t.Logf("reads after a write, one replica paused and one 200 ms behind: median %v, max %v", took[len(took)/2], took[len(took)-1])
	if med := took[len(took)/2]; med > 75*time.Millisecond {
		t.Errorf("median read after a write took %v: it waited for the paused replica (budget 150ms)", med)
	}
}

// TestReplayConflictEndsOnThePrimary: the replicas cancel standby queries
// that hold back vacuum for more than 1 s (max_standby_streaming_delay)
// while the primary updates and vacuums the table in a loop. A 3 s read
// is cancelled on one replica, then on the other (which replays the same
// WAL) when that one may serve it then, then served by the primary: the
// caller gets its rows, and Stats shows the retries and the fallback. (In one
// PostgreSQL 18 CI run no other replica could serve the read when the
// first cancelled it, and it went to the primary at once: one retry.) The next run of the statement goes to the
// primary at once.
func TestReplayConflictEndsOnThePrimary(t *testing.T) {
	for _, inner := range drivers {
		t.Run(inner, func(t *testing.T) {
			db := open(t, inner)
			ctx := ctxFor(t)
			tbl := table(t, db)
			if _, err := db.ExecContext(ctx, "INSERT INTO "+tbl+" (v) SELECT g::text FROM generate_series(1, 100) g"); err != nil {
				t.Fatal(err)
			}
			for _, i := range replicaNodes() {
				setStandbyDelay(t, i, "1s")
			}
			vctx, stopVacuum := context.WithCancel(ctx)
			vacuumed := make(chan error, 1)
			go func() {
				for vctx.Err() == nil {
					for _, s := range []string{"UPDATE " + tbl + " SET v = v || '.'", "VACUUM " + tbl} {
						if err := cluster.Exec(vctx, cluster.Primary(), s); err != nil && vctx.Err() == nil {
							vacuumed <- err
							return
						}
					}
				}
				vacuumed <- nil
			}()
			q := "SELECT count(*) FROM " + tbl + ", pg_sleep(3)"
			var n int
			began := time.Now()
			if err := db.QueryRowContext(ctx, q).Scan(&n); err != nil {
				t.Fatalf("long read under replay conflicts: %v", err)
			}
			first := time.Since(began)
			began = time.Now()
			if err := db.QueryRowContext(ctx, q).Scan(&n); err != nil {
				t.Fatalf("the same read again: %v", err)
			}
			again := time.Since(began)
			stopVacuum()
			if err := <-vacuumed; err != nil {
				t.Fatal(err)
			}
			st := statsOf(t, db)
			t.Logf("%d rows; conflict retries %d, conflict fallbacks %d, avoided %d, hedges %d (denied %d); the first run took %v, the second %v",
				n, st.ConflictRetries, st.Fallbacks[pgreplica.ReasonConflict], st.ConflictsAvoided, st.Hedges, st.HedgesDenied, first, again)
			if n != 100 {
				t.Errorf("count %d, want 100", n)
			}
			if st.ConflictRetries < 1 || st.Fallbacks[pgreplica.ReasonConflict] < 2 || st.ConflictsAvoided < 1 {
				t.Errorf("conflict retries %d, conflict fallbacks %d, avoided %d; want >= 1, >= 2, >= 1",
					st.ConflictRetries, st.Fallbacks[pgreplica.ReasonConflict], st.ConflictsAvoided)
			}
		})
	}
}

// TestPrimaryPoolerOutage: the primary is reached through a PgBouncer
// that goes down for 200 ms, three times, while writers and readers run
// with a 5 s deadline each. No read fails and no write is refused: a
// statement that found the port refusing connections waits for the
// primary and is sent once it answers. (The deadline outlasts the three
// outages: back up, PgBouncer opens its server connections one at a
// time, about 20 ms each here and more under load, so the eight workers'
// new sessions take 200 ms or more, and a statement can be cut off by
// the next outage while it waits for one. With 2 s it failed when that
// happened twice.) A write cut off in flight by the
// shutdown reports ErrWriteOutcomeUnknown; every write is in the table at
// most once, every acknowledged one exactly once.
func TestPrimaryPoolerOutage(t *testing.T) {
	pb := cluster.PgBouncer(t, cluster.Primary(), integration.PoolSession)
	addrs := []string{pb.Addr()}
	for _, i := range replicaNodes() {
		addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", cluster.Port(i)))
	}
	db, _ := openShape(t, "pgx", addrs)
	ctx := ctxFor(t)
	tbl := table(t, db)

	var next atomic.Int64
	var mu sync.Mutex
	acked, unknown := map[int64]bool{}, map[int64]bool{}
	var failed []error
	fail := func(err error) {
		mu.Lock()
		failed = append(failed, err)
		mu.Unlock()
	}
	stop := loop(8, func(w int) {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if w%2 == 1 {
			var n int
			if err := db.QueryRowContext(rctx, "SELECT count(*) FROM "+tbl).Scan(&n); err != nil {
				fail(fmt.Errorf("read: %w", err))
			}
			return
		}
		id := next.Add(1)
		_, err := db.ExecContext(rctx, "INSERT INTO "+tbl+" (id, v) VALUES ($1, 'w')", id)
		mu.Lock()
		switch {
		case err == nil:
			acked[id] = true
		case errors.Is(err, pgreplica.ErrWriteOutcomeUnknown):
			unknown[id] = true
		}
		mu.Unlock()
		if err != nil && !errors.Is(err, pgreplica.ErrWriteOutcomeUnknown) {
			fail(fmt.Errorf("write %d: %w", id, err))
		}
	})
	var downs []time.Duration
	for range 3 {
		time.Sleep(300 * time.Millisecond) // traffic between the outages
		d, err := pb.Outage(ctx, 200*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		downs = append(downs, d)
	}
	time.Sleep(300 * time.Millisecond)
	stop()

	rows, err := db.QueryContext(pgreplica.WithPrimary(ctx), "SELECT id, count(*) FROM "+tbl+" GROUP BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := map[int64]bool{}
	for rows.Next() {
		var id, n int64
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		seen[id] = true
		if n != 1 {
			t.Errorf("write %d is in the table %d times", id, n)
		}
		if !acked[id] && !unknown[id] {
			t.Errorf("write %d is in the table, but its caller was told it failed", id)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for id := range acked {
		if !seen[id] {
			t.Errorf("acknowledged write %d is lost", id)
		}
	}
	t.Logf("PgBouncer down %v; %d writes acknowledged, %d of unknown outcome; %d failures", downs, len(acked), len(unknown), len(failed))
	for i, err := range failed {
		if i == 5 {
			break
		}
		t.Errorf("failed in the outages: %v", err)
	}
	if len(acked) == 0 {
		t.Error("no write was acknowledged")
	}
}

// loop runs step(w) over and over on n goroutines (w = 0 … n-1) until
// the returned stop is called, which waits for them.
func loop(n int, step func(w int)) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
					step(w)
				}
			}
		}()
	}
	return func() {
		close(done)
		wg.Wait()
	}
}

// replicaNodes returns the indexes of the cluster's replicas.
func replicaNodes() []int {
	var reps []int
	for i := range cluster.Len() {
		if i != cluster.Primary() {
			reps = append(reps, i)
		}
	}
	return reps
}

// awaitPaused waits until the connector's probes have seen every
// replica's replay paused (or every one resumed).
func awaitPaused(t *testing.T, db *sql.DB, paused bool) {
	t.Helper()
	for _, i := range replicaNodes() {
		awaitNodeState(t, db, cluster.Port(i), paused)
	}
}

func awaitNodePaused(t *testing.T, db *sql.DB, port int) { awaitNodeState(t, db, port, true) }

// awaitNodeState waits until the connector's probe of the node on port
// says its replay is paused (or not).
func awaitNodeState(t *testing.T, db *sql.DB, port int, paused bool) {
	t.Helper()
	c, err := pgreplica.ConnectorOf(ctxFor(t), db)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, ns := range c.Nodes() {
			if ns.Addr == addr && ns.ReplayPaused == paused {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the connector never saw %s with replay paused = %v", addr, paused)
		}
		time.Sleep(10 * time.Millisecond) // the monitor probes every 250 ms
	}
}

// statsOf returns the Stats of db's connector.
func statsOf(t *testing.T, db *sql.DB) pgreplica.Stats {
	t.Helper()
	c, err := pgreplica.ConnectorOf(ctxFor(t), db)
	if err != nil {
		t.Fatal(err)
	}
	return c.Stats()
}

// setStandbyDelay sets max_standby_streaming_delay on replica i until the
// test ends.
func setStandbyDelay(t *testing.T, i int, d string) {
	t.Helper()
	mustExec(t, i, "ALTER SYSTEM SET max_standby_streaming_delay = '"+d+"'")
	mustExec(t, i, "SELECT pg_reload_conf()")
	// The reload is a signal: wait until a new backend reads the value
	// (the startup process reads it on the same signal).
	ctx := ctxFor(t)
	for {
		got, err := cluster.QueryString(ctx, i, "SELECT current_setting('max_standby_streaming_delay')")
		if err != nil {
			t.Fatal(err)
		}
		if got == d {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = cluster.Exec(ctx, i, "ALTER SYSTEM RESET max_standby_streaming_delay")
		_ = cluster.Exec(ctx, i, "SELECT pg_reload_conf()")
	})
}
