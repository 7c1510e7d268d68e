package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
)

// capacityWriters are the numbers of concurrent writers of
// BenchmarkWriteCapacity: one (latency-bound), a few, and more than the
// machine has cores (the primary is the bottleneck).
var capacityWriters = []int{1, 4, 16}

// capacityConns bounds each side's connections to the primary, the same on
// both: database/sql's MaxOpenConns (and MaxIdleConns, so that no
// connection is closed and reopened between writes) on both handles, and
// pgreplica's physical pool per host.
const capacityConns = 20

// capacityBlock is how many writes one side does in a round before the
// other side takes its turn: long enough for the writers to reach their
// steady state, short enough that both sides see the same machine load.
const capacityBlock = 1024

// BenchmarkWriteCapacity measures what the primary can take and what each
// write costs it, with 1, 4 and 16 concurrent writers doing autocommit
// INSERTs through ExecContext, plain pgx (sql.Open("pgx", primary)) against
// pgreplica over pgx (which also captures every write's LSN, however it
// does it). Users adopt replicas because the primary is their scarce
// resource: a driver that doubles the primary's work per write halves its
// capacity even when each write's latency looks fine.
//
// b.N is the number of writes per side. They run in rounds of
// capacityBlock writes per side, the sides alternating and swapping order
// every round, so that both see the same load on a shared machine; ns/op
// is the time of one write on each side, meter readings excluded. Per
// side, over the whole run, it reports:
//
//   - direct-writes/s, pgreplica-writes/s: writes over the time the side's
//     writers ran;
//   - ratio-writes/s: the median over rounds of pgreplica's writes/s over
//     direct's in the same round (the capacity goal is stated in it);
//   - direct-stmts/write, pgreplica-stmts/write: statements the primary
//     ran (pg_stat_statements, sum(calls), pgreplica's topology probe
//     excluded) per write;
//   - direct-cpu-us/write, pgreplica-cpu-us/write: CPU time of the
//     primary's postmaster and all its processes (integration.ServerCPU) per write,
//     in µs, and ratio-cpu/write, pgreplica's over direct's. The
//     background work of both handles (pgreplica's monitor probes the
//     primary a few times a second) runs during both sides' turns.
//   - ratio-cpu/write-paced, with direct-cpu-us/write-paced and
//     pgreplica-cpu-us/write-paced: the same, over a second run of b.N
//     writes per side with both sides paced at one rate (see pacedRate).
//
// CPU per write needs a few thousand writes per side to be more than
// scheduler noise; with -benchtime 200x only the statements are exact.
func BenchmarkWriteCapacity(b *testing.B) {
	for _, writers := range capacityWriters {
		b.Run("writers="+strconv.Itoa(writers), func(b *testing.B) {
			createTable(b, "bench")
			ep := clusterEndpoints()
			direct := openDB(b, "pgx", ep.nodeDSN(cluster.Primary()))
			routed := openDB(b, pgreplica.DriverName, ep.clusterDSN()+
				"&pgreplica_driver=pgx&application_name=pgreplica_bench"+
				"&pgreplica_max_conns_per_host="+strconv.Itoa(capacityConns))
			for _, db := range []*sql.DB{direct, routed} {
				db.SetMaxOpenConns(capacityConns)
				db.SetMaxIdleConns(capacityConns)
			}
			exec := func(db *sql.DB) func(context.Context) error {
				return func(ctx context.Context) error {
					_, err := db.ExecContext(ctx, capacityInsert, "x")
					return err
				}
			}
			benchWriteCapacity(b, writers, exec(direct), exec(routed))
		})
	}
}

// capacityInsert is the write of the capacity benchmarks.
const capacityInsert = "INSERT INTO bench (v) VALUES ($1)"

// capacitySide is one side of BenchmarkWriteCapacity and what it did.
type capacitySide struct {
	name    string
	write   func(context.Context) error
	writes  int64
	elapsed time.Duration // wall time of its writers
	work    primaryWork   // on the primary, summed over its rounds
}

// benchWriteCapacity compares two ways of writing (direct and routed
// each run one autocommit INSERT of capacityInsert) with writers
// concurrent writers, on a table "bench" the caller created: first as fast
// as each side goes (capacity), then both paced at the same rate, 70 % of
// the slower side's capacity, so that what a write costs the primary is
// compared at the same load (see pacedRate).
func benchWriteCapacity(b *testing.B, writers int, direct, routed func(context.Context) error) {
	cluster.Need(b)
	ctx := context.Background()
	meter := newPrimaryMeter(b, ctx)
	for _, w := range []func(context.Context) error{direct, routed} {
		// Open every writer's connection and fill the statement caches.
		if _, err := concurrentWrites(ctx, w, writers, writers*warmup); err != nil {
			b.Fatalf("warm-up: %v", err)
		}
	}
	b.ResetTimer()
	full := []*capacitySide{{name: "direct", write: direct}, {name: "pgreplica", write: routed}}
	ratios := capacityRounds(b, ctx, meter, full, writers, 0)
	if len(ratios) == 0 {
		return // b.N == 0
	}
	rate := pacedRate * min(full[0].rate(), full[1].rate())
	paced := []*capacitySide{{name: "direct", write: direct}, {name: "pgreplica", write: routed}}
	capacityRounds(b, ctx, meter, paced, writers, rate)
	b.StopTimer()
	for _, s := range full {
		b.ReportMetric(s.rate(), s.name+"-writes/s")
		if s.work.statements >= 0 {
			b.ReportMetric(float64(s.work.statements)/float64(s.writes), s.name+"-stmts/write")
		}
		if s.work.cpu >= 0 {
			b.ReportMetric(s.cpuPerWrite(), s.name+"-cpu-us/write")
		}
	}
	slices.Sort(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "ratio-writes/s")
	if r, ok := cpuRatio(full); ok {
		b.ReportMetric(r, "ratio-cpu/write")
	}
	if r, ok := cpuRatio(paced); ok {
		b.ReportMetric(r, "ratio-cpu/write-paced")
		b.ReportMetric(paced[0].cpuPerWrite(), "direct-cpu-us/write-paced")
		b.ReportMetric(paced[1].cpuPerWrite(), "pgreplica-cpu-us/write-paced")
	}
}

// pacedRate is the share of the slower side's capacity both sides are
// paced at for the second comparison. At full speed each side's load on
// the primary is its own throughput, and on a machine where the client and
// the servers share cores a client that spends more CPU per write leaves
// the primary a lower load: fewer commits share a WAL flush and a WAL
// sender's wake-up, so each write costs the primary more, whoever sent it.
// At the same rate that effect is gone and what remains is what the
// handle itself asks of the primary.
const pacedRate = 0.7

// capacityRounds runs b.N writes per side in rounds of capacityBlock, the
// sides alternating and swapping order every round so that both see the
// same machine load, paced at rate (0: as fast as they go), and returns
// per round the ratio of routed's writes/s over direct's.
func capacityRounds(b *testing.B, ctx context.Context, meter *primaryMeter, sides []*capacitySide, writers int, rate float64) []float64 {
	var ratios []float64
	for round, done := 0, 0; done < b.N; round++ {
		n := min(capacityBlock, b.N-done)
		var took [2]time.Duration
		for k := range sides {
			i := (k + round) % 2 // direct first in even rounds
			s := sides[i]
			b.StopTimer()
			before := meter.begin(b, ctx)
			b.StartTimer()
			elapsed, err := pacedWrites(ctx, s.write, writers, n, rate)
			b.StopTimer()
			if err != nil {
				b.Fatalf("%s: %v", s.name, err)
			}
			s.add(n, elapsed, meter.end(b, ctx).since(before))
			took[i] = elapsed
			b.StartTimer()
		}
		// Same n on both sides: the ratio of writes/s is the inverse
		// ratio of the times.
		ratios = append(ratios, float64(took[0])/float64(took[1]))
		done += n
	}
	return ratios
}

func (s *capacitySide) rate() float64 { return float64(s.writes) / s.elapsed.Seconds() }

func (s *capacitySide) cpuPerWrite() float64 {
	return float64(s.work.cpu) / float64(time.Microsecond) / float64(s.writes)
}

// cpuRatio is the routed side's primary CPU per write over direct's.
func cpuRatio(sides []*capacitySide) (float64, bool) {
	d, p := sides[0], sides[1]
	if d.work.cpu <= 0 || p.work.cpu < 0 {
		return 0, false
	}
	return p.cpuPerWrite() / d.cpuPerWrite(), true
}

// add records one round of the side: n writes in elapsed, costing the
// primary w. What is unknown in w stays unknown in the total.
func (s *capacitySide) add(n int, elapsed time.Duration, w primaryWork) {
	if s.writes == 0 {
		s.work = w
	} else {
		if s.work.statements >= 0 {
			s.work.statements = known(w.statements, s.work.statements+w.statements)
		}
		if s.work.cpu >= 0 {
			s.work.cpu = time.Duration(known(int64(w.cpu), int64(s.work.cpu+w.cpu)))
		}
	}
	s.writes += int64(n)
	s.elapsed += elapsed
}

// known returns sum unless part, a reading it includes, is unknown (< 0).
func known(part, sum int64) int64 {
	if part < 0 {
		return -1
	}
	return sum
}

// concurrentWrites runs n writes from writers goroutines, each taking the
// next write until none is left, and returns the time they took together.
func concurrentWrites(ctx context.Context, write func(context.Context) error, writers, n int) (time.Duration, error) {
	return pacedWrites(ctx, write, writers, n, 0)
}

// pacedWrites is concurrentWrites with the k-th write due no earlier than
// k/rate after the start (rate in writes per second; 0: as fast as the
// writers go), so that two sides can be compared at the same load.
func pacedWrites(ctx context.Context, write func(context.Context) error, writers, n int, rate float64) (time.Duration, error) {
	var left atomic.Int64
	left.Store(int64(n))
	errs := make([]error, writers)
	var wg sync.WaitGroup
	start := time.Now()
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := int64(n) - left.Add(-1) - 1
				if k >= int64(n) {
					return
				}
				if rate > 0 {
					time.Sleep(time.Until(start.Add(time.Duration(float64(k) / rate * float64(time.Second)))))
				}
				if err := write(ctx); err != nil {
					errs[g] = fmt.Errorf("writer %d: %w", g, err)
					left.Store(0)
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start), errors.Join(errs...)
}
