// Package histogram holds the mechanics of the connector's wait
// histogram: its fixed bucket bounds (Bounds), a histogram of atomics that
// a read records into without a lock (Latency), and the quantile estimate
// over cumulative buckets (Quantile). It needs no router: the root package
// keeps the histogram among its counters and copies what Load reads into
// its public WaitStats.
package histogram

import (
	"sync/atomic"
	"time"
)

// Bounds are the histogram's upper bounds.
var Bounds = [...]time.Duration{
	50 * time.Microsecond, 100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond,
	25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
	500 * time.Millisecond, time.Second, 2500 * time.Millisecond, 5 * time.Second,
}

// Latency is a fixed-bucket latency histogram of atomics. Its layout is
// the connector's: the first bucket comes first, so that it shares the
// cache line of the counters placed before the histogram.
type Latency struct {
	counts [len(Bounds) + 1]atomic.Int64 // last: above every bound
	sum    atomic.Int64
	max    atomic.Uint64
}

// Observe records one latency.
func (h *Latency) Observe(d time.Duration) {
	if d <= 0 {
		// Most reads wait for nothing: nothing to add to sum or max.
		h.counts[0].Add(1)
		return
	}
	i := 0
	for i < len(Bounds) && d > Bounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sum.Add(int64(d))
	raise(&h.max, uint64(d))
}

// raise sets a to v if v is higher.
func raise(a *atomic.Uint64, v uint64) {
	for {
		cur := a.Load()
		if v <= cur || a.CompareAndSwap(cur, v) {
			return
		}
	}
}

// Load reads the histogram: the cumulative count of observations at or
// below each of Bounds, the count of all of them (above every bound too),
// their sum and the longest.
func (h *Latency) Load() (cum [len(Bounds)]int64, count int64, sum, longest time.Duration) {
	var counts [len(Bounds) + 1]int64
	for i := range counts {
		counts[i] = h.counts[i].Load()
		count += counts[i]
	}
	var c int64
	for i := range cum {
		c += counts[i]
		cum[i] = c
	}
	return cum, count, time.Duration(h.sum.Load()), time.Duration(h.max.Load())
}

// Quantile estimates quantile q (0 < q ≤ 1) of count observations from n
// cumulative buckets, bucket(i) being the i-th's upper bound and count: it
// finds the bucket holding rank q·count and interpolates linearly between
// that bucket's bounds, as Prometheus' histogram_quantile does, assuming
// the bucket's observations are spread evenly. The estimate never exceeds
// longest (when set); above the largest bound it is that bound. bucket is
// a function so that the caller's own bucket type needs no copy.
func Quantile(q float64, count int64, longest time.Duration, n int, bucket func(i int) (upper time.Duration, cum int64)) time.Duration {
	if count == 0 || n == 0 {
		return 0
	}
	rank := q * float64(count)
	est, _ := bucket(n - 1)
	var lower time.Duration
	var below int64
	for i := range n {
		upper, cum := bucket(i)
		if k := cum - below; k > 0 && float64(cum) >= rank {
			frac := (rank - float64(below)) / float64(k)
			est = lower + time.Duration(frac*float64(upper-lower))
			break
		}
		lower, below = upper, cum
	}
	if longest > 0 {
		est = min(est, longest)
	}
	return est
}
