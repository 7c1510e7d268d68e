package bench

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"
)

// rtTable is the table TestRoundTrips works on; its name is also the
// marker by which the counting proxies recognise the connections that
// carry the measured operations.
const rtTable = "rt_bench_marker"

// rtOps is how many times each operation runs while counting, after
// rtWarmup runs that open the connections and fill the statement caches.
// A handle that spreads reads needs a connection on each replica, and
// round robin takes an idle replica for a turn of 16 reads: 40 runs cross
// two turns.
const (
	rtOps    = 10
	rtWarmup = 40
)

// cost is what one operation made the client and the servers do.
type cost struct {
	roundTrips int   // flights of client bytes, summed over all nodes
	statements int64 // pg_stat_statements calls, summed over all nodes; -1 when unknown
	// deferred counts the statements that read write positions after the
	// caller had its result (pgreplica's captures, on a connection of
	// their own, shared between writes); -1 when unknown.
	deferred int64
}

// TestRoundTrips counts, per operation, the round trips and the server
// statements of the direct inner driver and of pgreplica, logs them as a
// table (go test -v), and checks them against checkCost: pgreplica's pgx
// path adds no round trip to untokened and tokened reads, autocommit
// INSERTs through Exec and read-write commits.
func TestRoundTrips(t *testing.T) {
	cluster.Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	ep, proxies := countingEndpoints(t)
	stmts := newStatementCounter(t, ctx)
	createTable(t, rtTable)

	var report strings.Builder
	fmt.Fprintf(&report, "\n%-6s %-18s %22s %22s %10s\n", "driver", "operation", "round trips/op", "statements/op", "deferred")
	fmt.Fprintf(&report, "%-6s %-18s %10s %11s %10s %11s %10s\n", "", "", "direct", "pgreplica", "direct", "pgreplica", "pgreplica")
	for _, drv := range drivers {
		t.Run(drv, func(t *testing.T) {
			// A short monitor interval only makes the router learn sooner
			// that the replicas caught up; its probes are not counted.
			// Hedging is off: a read the loaded machine held up past the
			// hedge delay would be sent twice, which is the point of a
			// hedge (bounded, see hedge.go) but not the cost of a read.
			e := newEnv(t, drv, ep, rtTable, "tuning_monitor_interval=50ms", "tuning_hedge_delay=-1s")
			for _, w := range workloads {
				d := measure(t, ctx, e, w, "direct", proxies, stmts)
				r := measure(t, ctx, e, w, "pgreplica", proxies, stmts)
				fmt.Fprintf(&report, "%-6s %-18s %10s %11s %10s %11s %10s\n", drv, w.name,
					perOp(int64(d.roundTrips)), perOp(int64(r.roundTrips)), perOp(d.statements), perOp(r.statements), perOp(r.deferred))
				checkCost(t, drv, w, d, r)
			}
		})
	}
	t.Log(report.String())
}

// checkCost asserts what the design promises (DESIGN.md §3, "What the
// caller pays"): on the caller's path, every operation costs exactly the
// inner driver's round trips and statements. A write's position is read
// later, by a capture that covers every write before it: at most one
// deferred statement per write, off the caller's path. A read with a
// Session also reads the replica's replay position after the read, so
// that the session's next read cannot go back past the snapshot this one
// saw (monotonic reads): one more statement and, today, one more round
// trip.
func checkCost(t *testing.T, drv string, w workload, d, r cost) {
	t.Helper()
	extraRT := int64(r.roundTrips - d.roundTrips)
	extraSt := r.statements - d.statements
	knownSt := d.statements >= 0 && r.statements >= 0
	atMost := func(what string, got, want int64) {
		if got > want*rtOps {
			t.Errorf("%s %s: pgreplica adds %s %s per operation, want at most %d", drv, w.name, perOp(got), what, want)
		}
	}
	exactly := func(what string, got, want int64) {
		if got != want*rtOps {
			t.Errorf("%s %s: pgreplica adds %s %s per operation, want %d", drv, w.name, perOp(got), what, want)
		}
	}
	switch {
	case w.name == txStmt.name:
		// lib/pq alone prepares the statement again in every
		// transaction; pgreplica keeps it prepared on the connection
		// (internal/keptstmt), so it may cost less, never more.
		atMost("round trips", extraRT, 0)
		if knownSt {
			atMost("statements", extraSt, 0)
			atMost("deferred statements", r.deferred, 1)
		}
	case w.name == readSession.name:
		atMost("round trips", extraRT, 1)
		if knownSt {
			atMost("statements", extraSt, 1)
		}
	case w.replicaRead:
		exactly("round trips", extraRT, 0)
		if knownSt {
			exactly("statements", extraSt, 0)
		}
	default: // a write: its position is read later, shared
		exactly("round trips", extraRT, 0)
		if knownSt {
			exactly("statements", extraSt, 0)
			atMost("deferred statements", r.deferred, 1)
		}
	}
}

// perOp formats a count over rtOps operations as a per-operation figure.
func perOp(n int64) string {
	if n < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", float64(n)/rtOps)
}

// measure runs w rtOps times on one side, after a warm-up that opens the
// connections and fills the statement caches, and returns what it cost.
func measure(t *testing.T, ctx context.Context, e *env, w workload, impl string, proxies []*countingProxy, sc *statementCounter) cost {
	t.Helper()
	opCtx, db := w.side(impl)(ctx, e)
	return measureRun(t, ctx, e.drv+" "+w.name+" "+impl, func(i int) error { return w.run(opCtx, e, db, i) }, proxies, sc)
}

// measureRun runs run rtOps times, after rtWarmup runs, and returns what
// those rtOps runs cost; label names the operation in failures.
func measureRun(t *testing.T, ctx context.Context, label string, run func(i int) error, proxies []*countingProxy, sc *statementCounter) cost {
	t.Helper()
	for i := range rtWarmup {
		if err := run(i); err != nil {
			t.Fatalf("%s: %v", label, err)
		}
	}
	flightsBefore := make([]map[*proxiedConn]int, len(proxies))
	for i, p := range proxies {
		flightsBefore[i] = p.flightCounts()
	}
	stmtsBefore, deferredBefore := sc.total(t, ctx), sc.captures(t, ctx)
	for i := range rtOps {
		if err := run(i); err != nil {
			t.Fatalf("%s: %v", label, err)
		}
	}
	var c cost
	for i, p := range proxies {
		c.roundTrips += p.roundTripsSince(flightsBefore[i])
	}
	// Captures of the last writes are due a couple of milliseconds after
	// them: let them run, so that each side's count is complete.
	time.Sleep(20 * time.Millisecond)
	c.statements, c.deferred = -1, -1
	if after := sc.total(t, ctx); after >= 0 && stmtsBefore >= 0 {
		c.statements = after - stmtsBefore
	}
	if after := sc.captures(t, ctx); after >= 0 && deferredBefore >= 0 {
		c.deferred = after - deferredBefore
	}
	return c
}

// statementCounter reads pg_stat_statements on every node, over direct
// connections that bypass the proxies. A nil counter knows nothing.
type statementCounter struct {
	nodes []*sql.DB
}

// countSQL sums the calls of every statement except this query itself,
// pgreplica's topology probe (recognised by pg_control_system), which runs
// on its own connection in the background, and its captures of write
// positions, counted apart by captureCountSQL.
const (
	countSQL = `SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements
 WHERE query NOT LIKE '%pg_stat_statements%' AND query NOT LIKE '%pg_control_system%'
 AND query NOT LIKE '%pg_current_wal_flush_lsn%' AND query NOT LIKE '%pg_current_wal_insert_lsn%'`
	captureCountSQL = `SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements
 WHERE query NOT LIKE '%pg_stat_statements%' AND query NOT LIKE '%pg_control_system%'
 AND (query LIKE '%pg_current_wal_flush_lsn%' OR query LIKE '%pg_current_wal_insert_lsn%')`
)

// newStatementCounter returns nil, and says so in the log, when the
// servers were started without pg_stat_statements.
func newStatementCounter(t testing.TB, ctx context.Context) *statementCounter {
	t.Helper()
	p := cluster.Primary()
	libs, err := cluster.QueryString(ctx, p, "SHOW shared_preload_libraries")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(libs, "pg_stat_statements") {
		t.Log("pg_stat_statements is not installed with these server binaries: statements are not counted")
		return nil
	}
	// The replicas get the view by replaying this; newEnv waits for that.
	if err := cluster.Exec(ctx, p, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		t.Fatal(err)
	}
	sc := &statementCounter{}
	for i := range cluster.Len() {
		sc.nodes = append(sc.nodes, openDB(t, "pgx", cluster.NodeDSN(i)))
	}
	return sc
}

// total returns the calls so far summed over all nodes, or -1.
func (sc *statementCounter) total(t testing.TB, ctx context.Context) int64 {
	t.Helper()
	if sc == nil {
		return -1
	}
	var sum int64
	for i := range sc.nodes {
		sum += sc.onNode(t, ctx, i)
	}
	return sum
}

// onNode returns the calls so far on node i alone, or -1.
func (sc *statementCounter) onNode(t testing.TB, ctx context.Context, i int) int64 {
	return sc.query(t, ctx, i, countSQL)
}

// everything returns the calls so far on node i, pgreplica's captures
// included (still not its topology probe, nor the counting query), or -1.
func (sc *statementCounter) everything(t testing.TB, ctx context.Context, i int) int64 {
	n := sc.onNode(t, ctx, i)
	if n < 0 || i != cluster.Primary() {
		return n
	}
	return n + sc.captures(t, ctx)
}

// captures returns the captures of write positions so far on the primary,
// or -1.
func (sc *statementCounter) captures(t testing.TB, ctx context.Context) int64 {
	return sc.query(t, ctx, cluster.Primary(), captureCountSQL)
}

func (sc *statementCounter) query(t testing.TB, ctx context.Context, i int, q string) int64 {
	t.Helper()
	if sc == nil {
		return -1
	}
	var n int64
	if err := sc.nodes[i].QueryRowContext(ctx, q).Scan(&n); err != nil {
		t.Fatalf("node %d: %v", i, err)
	}
	return n
}

// countingEndpoints puts a counting proxy in front of every node and
// returns the endpoints through them.
func countingEndpoints(t *testing.T) (endpoints, []*countingProxy) {
	t.Helper()
	ep := endpoints{}
	var proxies []*countingProxy
	for i := range cluster.Len() {
		p, err := newCountingProxy(fmt.Sprintf("127.0.0.1:%d", cluster.Port(i)), rtTable)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		proxies = append(proxies, p)
		ep.addrs = append(ep.addrs, p.Addr())
	}
	return ep, proxies
}
