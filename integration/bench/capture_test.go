package bench

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// BenchmarkCaptureFloor measures, with pgx's pgconn alone and no pgreplica
// code, what reading a write's LSN can cost at best, to tell the price of
// the mechanism from the price of its implementation. Each iteration runs
// one autocommit INSERT (a prepared statement) in every variant, in
// rotating order, each timed on its own:
//
//   - plain: the INSERT alone, the direct baseline;
//   - pipelined: the INSERT, Sync, then SELECT pg_current_wal_flush_lsn()
//     as an unnamed statement, Sync, in one flight (pgreplica's pgx path);
//   - pipelined-prepared: the same with the LSN query prepared once;
//   - two-trips: the INSERT, then the LSN query in a second round trip
//     (pgreplica's lib/pq path and INSERT … RETURNING through Query).
//
// It reports each variant's mean time per INSERT and the median, over
// blocks of pairBlock iterations, of its time over plain's.
func BenchmarkCaptureFloor(b *testing.B) {
	cluster.Need(b)
	createTable(b, "bench")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, clusterEndpoints().nodeDSN(cluster.Primary()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	const lsnSQL = "SELECT pg_current_wal_flush_lsn()::text"
	ins, err := conn.Prepare(ctx, "bench_insert", "INSERT INTO bench (v) VALUES ($1)")
	if err != nil {
		b.Fatal(err)
	}
	lsn, err := conn.Prepare(ctx, "bench_lsn", lsnSQL)
	if err != nil {
		b.Fatal(err)
	}
	pc := conn.PgConn()
	params := [][]byte{[]byte("x")}
	insert := func() error {
		_, err := pc.ExecStatement(ctx, ins, params, nil, nil).Close()
		return err
	}
	pipelined := func(prepared bool) func() error {
		return func() error {
			pl := pc.StartPipeline(ctx)
			pl.SendQueryStatement(ins, params, nil, nil)
			pl.SendPipelineSync()
			if prepared {
				pl.SendQueryStatement(lsn, nil, nil, nil)
			} else {
				pl.SendQueryParams(lsnSQL, nil, nil, nil, nil)
			}
			if err := pl.Sync(); err != nil {
				pl.Close()
				return err
			}
			for {
				res, err := pl.GetResults()
				if err != nil {
					pl.Close()
					return err
				}
				if res == nil {
					return pl.Close()
				}
				if rr, ok := res.(*pgconn.ResultReader); ok {
					if _, err := rr.Close(); err != nil {
						pl.Close()
						return err
					}
				}
			}
		}
	}
	twoTrips := func() error {
		if err := insert(); err != nil {
			return err
		}
		_, err := pc.ExecStatement(ctx, lsn, nil, nil, nil).Close()
		return err
	}
	variants := []struct {
		name string
		run  func() error
	}{
		{"plain", insert},
		{"pipelined", pipelined(false)},
		{"pipelined-prepared", pipelined(true)},
		{"two-trips", twoTrips},
	}
	total := make([]time.Duration, len(variants))
	block := make([]time.Duration, len(variants))
	ratios := make([][]float64, len(variants))
	for i := range warmup {
		for _, v := range variants {
			if err := v.run(); err != nil {
				b.Fatalf("%s (warm-up %d): %v", v.name, i, err)
			}
		}
	}
	n := 0
	for ; b.Loop(); n++ {
		for k := range variants {
			j := (k + n) % len(variants)
			start := time.Now()
			if err := variants[j].run(); err != nil {
				b.Fatalf("%s: %v", variants[j].name, err)
			}
			block[j] += time.Since(start)
		}
		if (n+1)%pairBlock == 0 {
			for k := range variants {
				ratios[k] = append(ratios[k], float64(block[k])/float64(block[0]))
				total[k] += block[k]
			}
			clear(block)
		}
	}
	if len(ratios[0]) == 0 {
		return // too few iterations for a block
	}
	iters := float64(len(ratios[0]) * pairBlock)
	for k, v := range variants {
		b.ReportMetric(float64(total[k])/iters, v.name+"-ns/op")
		if k > 0 {
			slices.Sort(ratios[k])
			b.ReportMetric(ratios[k][len(ratios[k])/2], v.name+"-ratio")
		}
	}
}
