package bench

import (
	"context"
	"slices"
	"testing"
	"time"
)

// pairBlock is how many operation pairs make one block of BenchmarkPaired.
const pairBlock = 64

// BenchmarkPaired runs every workload on both sides at once: each
// iteration is one direct operation and one pgreplica operation, in
// alternating order, each timed on its own. On a shared machine the load
// changes from one second to the next; operations this close in time see
// the same load, so their ratio is steady where two separate benchmarks'
// ns/op are not. It reports:
//
//   - direct-ns/op and pgreplica-ns/op: the mean time of each side;
//   - ratio: the median, over blocks of pairBlock pairs, of pgreplica's
//     time over direct's time (the figure the targets are stated in);
//   - ns/op: the time of one pair, both sides together.
func BenchmarkPaired(b *testing.B) {
	for _, w := range workloads {
		b.Run(w.name, func(b *testing.B) {
			for _, drv := range drivers {
				b.Run("drv="+drv, func(b *testing.B) {
					skipIfSessionless(b, w)
					createTable(b, "bench")
					benchPair(b, newEnv(b, drv, clusterEndpoints(), "bench"), w)
				})
			}
		})
	}
}

func benchPair(b *testing.B, e *env, w workload) {
	ctx := context.Background()
	dCtx, dDB := w.direct(ctx, e)
	pCtx, pDB := w.routed(ctx, e)
	var before int64
	if w.replicaRead {
		before = primaryReads(b, pDB)
	}
	runPaired(b,
		func(i int) error { return w.run(dCtx, e, dDB, i) },
		func(i int) error { return w.run(pCtx, e, pDB, i) })
	if w.replicaRead {
		if n := primaryReads(b, pDB) - before; n != 0 {
			b.Fatalf("%d reads ran on the primary", n)
		}
	}
}

// runPaired is the loop of a paired benchmark: after warmup runs of each
// side, every iteration runs one direct and one routed operation, in
// alternating order, each timed on its own, and reports the metrics
// BenchmarkPaired describes.
func runPaired(b *testing.B, direct, routed func(i int) error) {
	timed := func(run func(int) error, i int) time.Duration {
		start := time.Now()
		if err := run(i); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	for i := range warmup {
		timed(direct, i)
		timed(routed, i)
	}
	var sumD, sumP, blockD, blockP time.Duration
	var ratios []float64
	n := 0
	for ; b.Loop(); n++ {
		var d, p time.Duration
		if n%2 == 0 {
			d = timed(direct, n)
			p = timed(routed, n)
		} else {
			p = timed(routed, n)
			d = timed(direct, n)
		}
		sumD, sumP = sumD+d, sumP+p
		blockD, blockP = blockD+d, blockP+p
		if (n+1)%pairBlock == 0 {
			ratios = append(ratios, float64(blockP)/float64(blockD))
			blockD, blockP = 0, 0
		}
	}
	if n == 0 {
		return
	}
	b.ReportMetric(float64(sumD)/float64(n), "direct-ns/op")
	b.ReportMetric(float64(sumP)/float64(n), "pgreplica-ns/op")
	if len(ratios) == 0 { // too few pairs for a block: use them all
		ratios = append(ratios, float64(sumP)/float64(sumD))
	}
	slices.Sort(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "ratio")
}
