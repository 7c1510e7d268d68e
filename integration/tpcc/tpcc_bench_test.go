package tpcc

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "github.com/lib/pq"
	"github.com/pingcap/go-tpc/tpcc"

	"github.com/pgreplica/pgreplica"
)

// BenchmarkTPCCPaired runs go-tpc's TPC-C (one warehouse, 4 threads,
// replicas caught up) through pgreplica and through its inner driver
// alone on the primary, in alternating 5 s rounds, for lib/pq and pgx,
// and reports each side's transactions a second and pgreplica ÷ inner
// per round (the range). b.N is ignored: the rounds are the measure.
//
//	cd integration/tpcc && GOWORK=off go test -run '^$' -bench TPCCPaired -benchtime 1x
func BenchmarkTPCCPaired(b *testing.B) {
	cluster.Need(b)
	for _, inner := range []struct{ name, driver, pgreplica string }{
		{"pq", "postgres", "pq"},
		{"pgx", "pgx", "pgx"},
	} {
		b.Run(inner.name, func(b *testing.B) {
			ctx := context.Background()
			routed := openWith(b, pgreplica.DriverName, cluster.DSN()+"&pgreplica_driver="+inner.pgreplica+"&application_name=pgr_tpcc_bench")
			plain := openWith(b, inner.driver, cluster.NodeDSN(cluster.Primary())+"&application_name=pgr_tpcc_plain")
			cfg := &tpcc.Config{Driver: "postgres", DBName: "postgres", Threads: threads, Parts: 1, Warehouses: 1,
				PartitionType: tpcc.PartitionTypeHash, MaxMeasureLatency: 16 * time.Second, OutputStyle: "plain"}
			wr, err := tpcc.NewWorkloader(routed, cfg)
			if err != nil {
				b.Fatal(err)
			}
			wp, err := tpcc.NewWorkloader(plain, cfg)
			if err != nil {
				b.Fatal(err)
			}
			if err := execute(ctx, wr, "prepare"); err != nil {
				b.Fatalf("prepare: %v", err)
			}
			b.Cleanup(func() { _ = execute(context.Background(), wr, "cleanup") })
			var ratios []float64
			var sumR, sumP float64
			const rounds = 3
			for r := range rounds {
				if err := cluster.WaitCaughtUp(ctx); err != nil {
					b.Fatal(err)
				}
				// Alternate which side goes first.
				sides := []func() float64{func() float64 { return txPerSecond(b, wp) }, func() float64 { return txPerSecond(b, wr) }}
				if r%2 == 1 {
					slices.Reverse(sides)
				}
				a, c := sides[0](), sides[1]()
				tp, tr := a, c
				if r%2 == 1 {
					tp, tr = c, a
				}
				sumR, sumP = sumR+tr, sumP+tp
				ratios = append(ratios, tr/tp)
				b.Logf("round %d: pgreplica %.0f tx/s, %s alone %.0f tx/s, ratio %.3f", r+1, tr, inner.name, tp, tr/tp)
			}
			if c, err := pgreplica.ConnectorOf(ctx, routed); err == nil {
				st := c.Stats()
				b.Logf("pgreplica: reads %d on replicas, %d on the primary (%d right after a write), %d fell back; %d captures; wait %+v",
					st.ReplicaReads, st.PrimaryReads, st.RecentWriteReads, st.FallbackReads, st.LSNCaptures, st.Wait)
			}
			b.ReportMetric(sumR/rounds, "pgreplica-tx/s")
			b.ReportMetric(sumP/rounds, "inner-tx/s")
			b.ReportMetric(slices.Min(ratios), "ratio-min")
			b.ReportMetric(slices.Max(ratios), "ratio-max")
			fmt.Printf("%s: pgreplica ÷ %s alone %.3f–%.3f over %d rounds\n", inner.name, inner.name, slices.Min(ratios), slices.Max(ratios), rounds)
		})
	}
}

// txPerSecond runs TPC-C transactions on every thread for 5 s.
func txPerSecond(b *testing.B, w interface {
	InitThread(context.Context, int) context.Context
	CleanupThread(context.Context, int)
	Run(context.Context, int) error
}) float64 {
	const window = 5 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), window)
	defer cancel()
	var n atomic.Int64
	var wg sync.WaitGroup
	for i := range threads {
		wg.Go(func() {
			tctx := w.InitThread(ctx, i)
			defer w.CleanupThread(tctx, i)
			for tctx.Err() == nil {
				if err := w.Run(tctx, i); err != nil {
					if tctx.Err() == nil {
						b.Errorf("run: %v", err)
					}
					return
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	return float64(n.Load()) / window.Seconds()
}
