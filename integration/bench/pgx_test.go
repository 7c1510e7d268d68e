package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration/itest"
	"github.com/pgreplica/pgreplica/pgreplicapgx"
)

// The pgx-native handle (pgreplicapgx) against *pgxpool.Pool used
// directly, on the same cluster: the same operations through the same
// API, so the only difference is the routing.

// pgxHandle is what both sides offer: the calls of sqlc's DBTX and
// BeginTx.
type pgxHandle interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	QueryRow(context.Context, string, ...any) pgx.Row
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
	CopyFrom(context.Context, pgx.Identifier, []string, pgx.CopyFromSource) (int64, error)
	BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error)
}

// pgxEnv holds the direct pools and the handles, as env does for
// database/sql.
type pgxEnv struct {
	primary, replica *pgxpool.Pool // direct: the primary, replica node 1
	// reader prefers replica node 1 (by zone) and has a Session whose
	// seed write every replica replayed, as the router knows; writer
	// writes apart, so that its writes never raise reader's process
	// watermark.
	reader, writer    *pgreplicapgx.Pool
	session           *pgreplica.Session
	table             string
	selectSQL         string
	insertSQL         string
	returnSQL         string
	direct, routedDSN string
}

// newPgxEnv opens both sides on ep for table; params are extra DSN
// parameters of both (pool_max_conns for pgxpool, pgreplica_* and
// tuning_* for the handle: each side ignores the other's).
func newPgxEnv(tb testing.TB, ep endpoints, table string, conns int, params ...string) *pgxEnv {
	tb.Helper()
	cluster.Need(tb)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := &pgxEnv{
		session:   pgreplica.NewSession(),
		table:     table,
		selectSQL: "SELECT v FROM " + table + " WHERE id = $1",
		insertSQL: "INSERT INTO " + table + " (v) VALUES ($1)",
		returnSQL: "INSERT INTO " + table + " (v) VALUES ($1) RETURNING id",
	}
	size := strconv.Itoa(conns)
	e.primary = openPgxpool(tb, ep.nodeDSN(cluster.Primary())+"&pool_max_conns="+size)
	e.replica = openPgxpool(tb, ep.nodeDSN(1)+"&pool_max_conns="+size)
	routed := ep.clusterDSN() + "&application_name=pgreplica_bench&pgreplica_max_conns_per_host=" + size
	for _, p := range params {
		routed += "&" + p
	}
	e.reader = openPgxHandle(tb, routed+"&pgreplica_zones=primary,near,far&pgreplica_zone=near")
	e.writer = openPgxHandle(tb, routed)
	if _, err := e.reader.Exec(pgreplica.WithSession(ctx, e.session), e.insertSQL, "seed"); err != nil {
		tb.Fatal(err)
	}
	if err := cluster.WaitCaughtUp(ctx); err != nil {
		tb.Fatal(err)
	}
	if err := routerCaughtUp(ctx, e.reader.Connector(), e.session.LSN()); err != nil {
		tb.Fatal(err)
	}
	return e
}

func openPgxpool(tb testing.TB, dsn string) *pgxpool.Pool {
	return pinged(tb, pgxpool.New, dsn)
}

func openPgxHandle(tb testing.TB, dsn string) *pgreplicapgx.Pool {
	return pinged(tb, itest.NewPgx, dsn)
}

// pinged opens a pool with open, pings it and closes it with tb.
func pinged[P interface {
	Ping(context.Context) error
	Close()
}](tb testing.TB, open func(context.Context, string) (P, error), dsn string) P {
	tb.Helper()
	p, err := open(context.Background(), dsn)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Close)
	if err := p.Ping(context.Background()); err != nil {
		tb.Fatal(err)
	}
	return p
}

// pgxWorkload is one operation, run the same way on both sides.
type pgxWorkload struct {
	name           string
	run            func(ctx context.Context, e *pgxEnv, h pgxHandle, i int) error
	direct, routed func(ctx context.Context, e *pgxEnv) (context.Context, pgxHandle)
	replicaRead    bool
}

func (w pgxWorkload) side(impl string) func(context.Context, *pgxEnv) (context.Context, pgxHandle) {
	if impl == "direct" {
		return w.direct
	}
	return w.routed
}

func pgxOnReplica(ctx context.Context, e *pgxEnv) (context.Context, pgxHandle) { return ctx, e.replica }
func pgxOnPrimary(ctx context.Context, e *pgxEnv) (context.Context, pgxHandle) { return ctx, e.primary }
func pgxOnWriter(ctx context.Context, e *pgxEnv) (context.Context, pgxHandle)  { return ctx, e.writer }
func pgxOnReader(ctx context.Context, e *pgxEnv) (context.Context, pgxHandle)  { return ctx, e.reader }

var pgxWorkloads = []pgxWorkload{
	{name: "ReadEventual", run: pgxRead, replicaRead: true, direct: pgxOnReplica,
		routed: func(ctx context.Context, e *pgxEnv) (context.Context, pgxHandle) {
			return pgreplica.WithEventual(ctx), e.reader
		}},
	{name: "ReadProcess", run: pgxRead, replicaRead: true, direct: pgxOnReplica, routed: pgxOnReader},
	{name: "ReadSession", run: pgxRead, replicaRead: true, direct: pgxOnReplica,
		routed: func(ctx context.Context, e *pgxEnv) (context.Context, pgxHandle) {
			return pgreplica.WithSession(ctx, e.session), e.reader
		}},
	{name: "ReadOnlyTx", run: pgxReadTx, replicaRead: true, direct: pgxOnReplica, routed: pgxOnReader},
	{name: "BatchRead", run: pgxBatchRead, replicaRead: true, direct: pgxOnReplica, routed: pgxOnReader},
	{name: "InsertExec", run: pgxInsert, direct: pgxOnPrimary, routed: pgxOnWriter},
	{name: "InsertReturning", run: pgxInsertReturning, direct: pgxOnPrimary, routed: pgxOnWriter},
	{name: "ReadWriteTx", run: pgxInsertTx, direct: pgxOnPrimary, routed: pgxOnWriter},
	{name: "BatchWrite", run: pgxBatchWrite, direct: pgxOnPrimary, routed: pgxOnWriter},
	{name: "CopyFrom", run: pgxCopy, direct: pgxOnPrimary, routed: pgxOnWriter},
}

func pgxRead(ctx context.Context, e *pgxEnv, h pgxHandle, i int) error {
	var v string
	return h.QueryRow(ctx, e.selectSQL, rowID(i)).Scan(&v)
}

func pgxInsert(ctx context.Context, e *pgxEnv, h pgxHandle, _ int) error {
	_, err := h.Exec(ctx, e.insertSQL, "x")
	return err
}

func pgxInsertReturning(ctx context.Context, e *pgxEnv, h pgxHandle, _ int) error {
	var id int64
	return h.QueryRow(ctx, e.returnSQL, "x").Scan(&id)
}

func pgxReadTx(ctx context.Context, e *pgxEnv, h pgxHandle, i int) error {
	tx, err := h.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	var v string
	if err := tx.QueryRow(ctx, e.selectSQL, rowID(i)).Scan(&v); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func pgxInsertTx(ctx context.Context, e *pgxEnv, h pgxHandle, _ int) error {
	tx, err := h.BeginTx(ctx, pgx.TxOptions{})
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, e.insertSQL, "x"); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// pgxBatchSize is how many statements a batch workload sends.
const pgxBatchSize = 3

func pgxBatchRead(ctx context.Context, e *pgxEnv, h pgxHandle, i int) error {
	b := &pgx.Batch{}
	for k := range pgxBatchSize {
		b.Queue(e.selectSQL, rowID(i+k))
	}
	return h.SendBatch(ctx, b).Close()
}

func pgxBatchWrite(ctx context.Context, e *pgxEnv, h pgxHandle, _ int) error {
	b := &pgx.Batch{}
	for range pgxBatchSize {
		b.Queue(e.insertSQL, "x")
	}
	return h.SendBatch(ctx, b).Close()
}

// pgxCopyRows is how many rows the COPY workload copies.
const pgxCopyRows = 10

func pgxCopy(ctx context.Context, e *pgxEnv, h pgxHandle, _ int) error {
	rows := make([][]any, pgxCopyRows)
	for k := range rows {
		rows[k] = []any{"x"}
	}
	_, err := h.CopyFrom(ctx, pgx.Identifier{e.table}, []string{"v"}, pgx.CopyFromRows(rows))
	return err
}

// pgxPrimaryReads is primaryReads for the handle.
func pgxPrimaryReads(p *pgreplicapgx.Pool) int64 {
	st := p.Stat()
	return st.PrimaryReads + st.FallbackReads + st.RecentWriteReads
}

// BenchmarkPairedPgx is BenchmarkPaired for the pgx-native handle against
// *pgxpool.Pool: every iteration one pgxpool operation and one through
// pgreplicapgx, alternating, each timed on its own; ratio is the median
// over blocks of pairBlock pairs.
func BenchmarkPairedPgx(b *testing.B) {
	for _, w := range pgxWorkloads {
		b.Run(w.name, func(b *testing.B) {
			createTable(b, "bench")
			e := newPgxEnv(b, clusterEndpoints(), "bench", 4)
			ctx := context.Background()
			// Both sides get the routed side's context: pgxpool ignores
			// pgreplica's values, and pgx takes one path for every context
			// but context.Background() itself (it watches the context for
			// cancellation: two lock pairs a query), which no application
			// passes with a request in hand.
			_, d := w.direct(ctx, e)
			pCtx, p := w.routed(ctx, e)
			dCtx := pCtx
			before := pgxPrimaryReads(e.reader)
			runPaired(b,
				func(i int) error { return w.run(dCtx, e, d, i) },
				func(i int) error { return w.run(pCtx, e, p, i) })
			if n := pgxPrimaryReads(e.reader) - before; w.replicaRead && n != 0 {
				b.Fatalf("%d reads ran on the primary", n)
			}
		})
	}
}

// BenchmarkWriteCapacityPgx is BenchmarkWriteCapacity for the pgx-native
// handle against *pgxpool.Pool: autocommit INSERTs through Exec from 1, 4
// and 16 writers, what each write costs the primary (statements, CPU)
// and the writes/s of each side.
func BenchmarkWriteCapacityPgx(b *testing.B) {
	for _, writers := range capacityWriters {
		b.Run("writers="+strconv.Itoa(writers), func(b *testing.B) {
			createTable(b, "bench")
			e := newPgxEnv(b, clusterEndpoints(), "bench", capacityConns)
			exec := func(h pgxHandle) func(context.Context) error {
				return func(ctx context.Context) error {
					_, err := h.Exec(ctx, capacityInsert, "x")
					return err
				}
			}
			benchWriteCapacity(b, writers, exec(e.primary), exec(e.writer))
		})
	}
}

// TestRoundTripsPgx counts, per operation, the round trips and server
// statements of *pgxpool.Pool used directly and of pgreplicapgx, logs
// them as a table (go test -v), and checks that the handle costs no more
// than pgxpool's round trips and exactly its statements on the caller's path, every
// operation included, and at most one deferred statement (a capture
// shared between writes) per write.
func TestRoundTripsPgx(t *testing.T) {
	cluster.Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ep, proxies := countingEndpoints(t)
	stmts := newStatementCounter(t, ctx)
	createTable(t, rtTable)
	// Hedging is off, as in TestRoundTrips: a read the loaded machine
	// held up past the hedge delay would be sent twice, by design.
	e := newPgxEnv(t, ep, rtTable, 4, "tuning_monitor_interval=50ms", "tuning_hedge_delay=-1s")

	var report strings.Builder
	fmt.Fprintf(&report, "\n%-16s %22s %22s %10s\n", "operation", "round trips/op", "statements/op", "deferred")
	fmt.Fprintf(&report, "%-16s %10s %11s %10s %11s %10s\n", "", "pgxpool", "pgreplica", "pgxpool", "pgreplica", "pgreplica")
	for _, w := range pgxWorkloads {
		var c [2]cost
		for k, impl := range []string{"direct", "pgreplica"} {
			opCtx, h := w.side(impl)(ctx, e)
			c[k] = measureRun(t, ctx, w.name+" "+impl, func(i int) error { return w.run(opCtx, e, h, i) }, proxies, stmts)
		}
		d, r := c[0], c[1]
		fmt.Fprintf(&report, "%-16s %10s %11s %10s %11s %10s\n", w.name,
			perOp(int64(d.roundTrips)), perOp(int64(r.roundTrips)), perOp(d.statements), perOp(r.statements), perOp(r.deferred))
		// No more than pgxpool's: COPY's data may reach the proxy in one
		// flight or two, on either side.
		if r.roundTrips > d.roundTrips {
			t.Errorf("%s: pgreplicapgx makes %s round trips per operation, pgxpool %s", w.name, perOp(int64(r.roundTrips)), perOp(int64(d.roundTrips)))
		}
		if d.statements >= 0 && r.statements != d.statements {
			t.Errorf("%s: pgreplicapgx runs %s statements per operation, pgxpool %s", w.name, perOp(r.statements), perOp(d.statements))
		}
		if !w.replicaRead && r.deferred > rtOps {
			t.Errorf("%s: %s deferred statements per write, want at most 1", w.name, perOp(r.deferred))
		}
	}
	t.Log(report.String())
}
