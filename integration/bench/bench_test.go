package bench

import (
	"context"
	"database/sql"
	"testing"

	"github.com/pgreplica/pgreplica"
)

// Each benchmark runs one workload for both inner drivers, first straight
// through the inner driver (impl=direct), then through pgreplica
// (impl=pgreplica), on the same freshly seeded table. Serial on purpose:
// the cost of a round trip shows best one operation at a time.

// BenchmarkReadEventual: an untokened read; pgreplica with WithEventual.
func BenchmarkReadEventual(b *testing.B) { benchWorkload(b, readEventual) }

// BenchmarkReadEventualSpread: as BenchmarkReadEventual, with pgreplica
// alternating between both replicas (its default) instead of preferring
// the direct side's replica.
func BenchmarkReadEventualSpread(b *testing.B) { benchWorkload(b, readSpread) }

// BenchmarkReadProcess: an untokened read with the default "process"
// consistency, by a process whose last write every replica has replayed.
func BenchmarkReadProcess(b *testing.B) { benchWorkload(b, readProcess) }

// BenchmarkReadToken: a tokened read (WithToken) whose position every
// replica has replayed, as the router already knows.
func BenchmarkReadToken(b *testing.B) { benchWorkload(b, readToken) }

// BenchmarkReadSession: a read with a Session whose watermark every
// replica has replayed, as the router already knows.
func BenchmarkReadSession(b *testing.B) { benchWorkload(b, readSession) }

// BenchmarkInsertExec: an autocommit INSERT with an argument through Exec;
// pgreplica also captures the commit's LSN.
func BenchmarkInsertExec(b *testing.B) { benchWorkload(b, insertExec) }

// BenchmarkInsertReturning: INSERT … RETURNING through QueryRow, with LSN
// capture on pgreplica's side.
func BenchmarkInsertReturning(b *testing.B) { benchWorkload(b, insertReturning) }

// BenchmarkReadOnlyTx: BEGIN READ ONLY; SELECT; COMMIT.
func BenchmarkReadOnlyTx(b *testing.B) { benchWorkload(b, readOnlyTx) }

// BenchmarkReadWriteTx: BEGIN; INSERT; COMMIT, with LSN capture at commit.
func BenchmarkReadWriteTx(b *testing.B) { benchWorkload(b, readWriteTx) }

// BenchmarkTxPreparedStmt: go-tpc's shape, statements prepared on a
// *sql.Conn used through Tx.Stmt (see txStmt).
func BenchmarkTxPreparedStmt(b *testing.B) { benchWorkload(b, txStmt) }

// BenchmarkConnStmtInTx: statements prepared on a *sql.Conn used as they
// are inside the conn's transaction (see connStmt).
func BenchmarkConnStmtInTx(b *testing.B) { benchWorkload(b, connStmt) }

func benchWorkload(b *testing.B, w workload) {
	for _, drv := range drivers {
		b.Run("drv="+drv, func(b *testing.B) {
			skipIfSessionless(b, w)
			createTable(b, "bench")
			e := newEnv(b, drv, clusterEndpoints(), "bench")
			for _, impl := range []string{"direct", "pgreplica"} {
				b.Run("impl="+impl, func(b *testing.B) { benchSide(b, e, w, impl) })
			}
		})
	}
}

// warmup runs before timing (b.Loop runs the function once): it fills the
// statement caches and opens the connections a side needs.
const warmup = 20

func benchSide(b *testing.B, e *env, w workload, impl string) {
	ctx, db := w.side(impl)(context.Background(), e)
	for i := range warmup {
		if err := w.run(ctx, e, db, i); err != nil {
			b.Fatal(err)
		}
	}
	check := impl == "pgreplica" && w.replicaRead
	var before int64
	if check {
		before = primaryReads(b, db)
	}
	cpu := processCPU()
	b.ReportAllocs()
	n := 0
	for ; b.Loop(); n++ {
		if err := w.run(ctx, e, db, n); err != nil {
			b.Fatal(err)
		}
	}
	if cpu >= 0 && n > 0 {
		// The client's own CPU time per operation: what pgreplica adds in
		// work, less sensitive than wall time to the scheduling delays of
		// a shared machine. Both sides include the monitors of the env's
		// pgreplica handles, which poll in the background.
		b.ReportMetric(float64(processCPU()-cpu)/float64(n), "cpu-ns/op")
	}
	if check {
		if n := primaryReads(b, db) - before; n != 0 {
			b.Fatalf("%d reads ran on the primary", n)
		}
	}
}

// primaryReads returns how many reads pgreplica handle db sent to the
// primary, by requirement or as a fallback. A read benchmark that quietly
// measured primary reads would be a lie: each must go to a replica.
func primaryReads(tb testing.TB, db *sql.DB) int64 {
	tb.Helper()
	c, err := pgreplica.ConnectorOf(context.Background(), db)
	if err != nil {
		tb.Fatal(err)
	}
	st := c.Stats()
	return st.PrimaryReads + st.FallbackReads + st.RecentWriteReads
}
