package bench

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkTxThroughput measures transactions a second with several
// workers at once, each on a *sql.Conn of its own (go-tpc's shape), the
// inner driver alone and through pgreplica, in alternating rounds: on a
// shared machine the load changes from one second to the next, and
// rounds this close in time see the same load. Run it with -benchtime 1x
// (a round count, not b.N, sets its length). Each transaction locks a row
// of its worker's (SELECT … FOR UPDATE) and updates it, in one of three
// shapes:
//
//   - Plain: tx.QueryRowContext and tx.ExecContext;
//   - TxStmt: statements prepared on the conn, taken in by tx.StmtContext;
//   - ConnStmt: statements prepared on the conn, used as they are while
//     the conn's transaction is open (database/sql runs them in it).
//
// It reports the median, over the rounds, of pgreplica's transactions a
// second over the inner driver's (ratio) with the lowest and highest
// (ratio-min, ratio-max), each side's transactions a second, and the
// client's CPU time per transaction of each side (the process's, while
// that side ran: what pgreplica adds in work, steadier than the ratio on
// a machine the servers share). PGREPLICA_BENCH_TX_ROUNDS and
// PGREPLICA_BENCH_TX_ROUND set the rounds (default 8) and a side's time in
// each (default 1s); PGREPLICA_BENCH_TX_WORKERS the workers (default 4).
func BenchmarkTxThroughput(b *testing.B) {
	for _, shape := range []txShape{shapePlain, shapeTxStmt, shapeConnStmt} {
		b.Run("shape="+shape.String(), func(b *testing.B) {
			for _, drv := range drivers {
				b.Run("drv="+drv, func(b *testing.B) {
					createTable(b, "bench")
					e := newEnv(b, drv, clusterEndpoints(), "bench")
					benchTxThroughput(b, e, shape)
				})
			}
		})
	}
}

type txShape int

const (
	shapePlain txShape = iota
	shapeTxStmt
	shapeConnStmt
)

func (s txShape) String() string { return [...]string{"Plain", "TxStmt", "ConnStmt"}[s] }

// txWorker is one worker's *sql.Conn on one side, with the statements
// prepared on it.
type txWorker struct {
	conn           *sql.Conn
	lock, update   *sql.Stmt
	lockQ, updateQ string
	first          int64 // its rows are first … first+txRows-1
}

// txRows is how many rows each worker locks in turn: no two workers ever
// wait for each other's lock.
const txRows = 100

func newTxWorker(ctx context.Context, b *testing.B, db *sql.DB, w int) *txWorker {
	conn, err := db.Conn(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	tw := &txWorker{conn: conn, first: int64(w*txRows + 1),
		lockQ:   "SELECT v FROM bench WHERE id = $1 FOR UPDATE",
		updateQ: "UPDATE bench SET v = $1 WHERE id = $2"}
	if tw.lock, err = conn.PrepareContext(ctx, tw.lockQ); err != nil {
		b.Fatal(err)
	}
	if tw.update, err = conn.PrepareContext(ctx, tw.updateQ); err != nil {
		b.Fatal(err)
	}
	return tw
}

// run runs one transaction of shape s on row first + i%txRows.
func (tw *txWorker) run(ctx context.Context, s txShape, i int) error {
	id := tw.first + int64(i%txRows)
	tx, err := tw.conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	var v string
	switch s {
	case shapePlain:
		err = tx.QueryRowContext(ctx, tw.lockQ, id).Scan(&v)
		if err == nil {
			_, err = tx.ExecContext(ctx, tw.updateQ, "t"+strconv.Itoa(i), id)
		}
	case shapeTxStmt:
		err = tx.StmtContext(ctx, tw.lock).QueryRowContext(ctx, id).Scan(&v)
		if err == nil {
			_, err = tx.StmtContext(ctx, tw.update).ExecContext(ctx, "t"+strconv.Itoa(i), id)
		}
	case shapeConnStmt:
		err = tw.lock.QueryRowContext(ctx, id).Scan(&v)
		if err == nil {
			_, err = tw.update.ExecContext(ctx, "t"+strconv.Itoa(i), id)
		}
	}
	if err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

func benchTxThroughput(b *testing.B, e *env, s txShape) {
	ctx := context.Background()
	rounds, round, workers := envInt("PGREPLICA_BENCH_TX_ROUNDS", 8), envDuration("PGREPLICA_BENCH_TX_ROUND", time.Second),
		envInt("PGREPLICA_BENCH_TX_WORKERS", 4)
	if workers*txRows > seedRows {
		b.Fatalf("%d workers need %d rows, the table has %d", workers, workers*txRows, seedRows)
	}
	var direct, routed []*txWorker
	for w := range workers {
		direct = append(direct, newTxWorker(ctx, b, e.primary, w))
		routed = append(routed, newTxWorker(ctx, b, e.writer, w))
	}
	// One side's round: every worker runs transactions until the round
	// ends; it returns the transactions a second and the client's CPU
	// time per transaction.
	side := func(ws []*txWorker, d time.Duration) (float64, time.Duration) {
		var done atomic.Int64
		var failed atomic.Value
		stop := make(chan struct{})
		var wg sync.WaitGroup
		cpu, start := processCPU(), time.Now()
		for _, tw := range ws {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					if err := tw.run(ctx, s, i); err != nil {
						failed.CompareAndSwap(nil, err)
						return
					}
					done.Add(1)
				}
			}()
		}
		time.Sleep(d) // the round's length is the measurement, not a wait for a condition
		close(stop)
		wg.Wait()
		elapsed, used := time.Since(start), processCPU()-cpu
		if err, _ := failed.Load().(error); err != nil {
			b.Fatal(err)
		}
		n := done.Load()
		if n == 0 {
			b.Fatal("no transaction completed in a round")
		}
		return float64(n) / elapsed.Seconds(), used / time.Duration(n)
	}
	// Warm both sides up: connections, statements, the servers' caches.
	side(direct, round/4)
	side(routed, round/4)
	var ratios []float64
	var dRate, pRate float64
	var dCPU, pCPU time.Duration
	for r := range rounds {
		var d, p float64
		var dc, pc time.Duration
		if r%2 == 0 {
			d, dc = side(direct, round)
			p, pc = side(routed, round)
		} else {
			p, pc = side(routed, round)
			d, dc = side(direct, round)
		}
		ratios = append(ratios, p/d)
		dRate, pRate, dCPU, pCPU = dRate+d, pRate+p, dCPU+dc, pCPU+pc
	}
	n := float64(len(ratios))
	slices.Sort(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "ratio")
	b.ReportMetric(ratios[0], "ratio-min")
	b.ReportMetric(ratios[len(ratios)-1], "ratio-max")
	b.ReportMetric(dRate/n, "direct-tx/s")
	b.ReportMetric(pRate/n, "pgreplica-tx/s")
	if dCPU >= 0 && pCPU >= 0 {
		b.ReportMetric(float64(dCPU)/n/float64(time.Microsecond), "direct-cpu-µs/tx")
		b.ReportMetric(float64(pCPU)/n/float64(time.Microsecond), "pgreplica-cpu-µs/tx")
	}
	b.Logf("%s, %s: %d rounds of %v a side, %d workers; ratios %s", s, e.drv, len(ratios), round, workers, fmtRatios(ratios))
}

func fmtRatios(rs []float64) string {
	s := ""
	for i, r := range rs {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%.3f", r)
	}
	return s
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
