package histogram

import (
	"testing"
	"time"
)

// stats is what the root package's WaitStats holds, under the same names,
// so that the assertions read as they do on WaitStats.
type stats struct {
	Count         int64
	Sum, Max      time.Duration
	P50, P95, P99 time.Duration
	Buckets       []bucket
}

type bucket struct {
	UpperBound time.Duration
	Count      int64
}

func (s stats) quantile(q float64) time.Duration {
	return Quantile(q, s.Count, s.Max, len(s.Buckets), func(i int) (time.Duration, int64) {
		return s.Buckets[i].UpperBound, s.Buckets[i].Count
	})
}

func snapshot(h *Latency) stats {
	cum, count, sum, longest := h.Load()
	ws := stats{Count: count, Sum: sum, Max: longest}
	for i, c := range cum {
		ws.Buckets = append(ws.Buckets, bucket{Bounds[i], c})
	}
	ws.P50, ws.P95, ws.P99 = ws.quantile(0.50), ws.quantile(0.95), ws.quantile(0.99)
	return ws
}

func TestWaitQuantilesInterpolate(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name          string
		waits         []time.Duration
		p50, p95, max time.Duration
	}{
		// Every wait 150 ms: the bucket (100 ms, 250 ms] holds them all;
		// interpolation gives 175 ms for the median, Max caps it at 150.
		{"all equal", repeat(150*ms, 100), 150 * ms, 150 * ms, 150 * ms},
		// Half at 1 ms, half at 200 ms: the median sits at the top of the
		// (500 µs, 1 ms] bucket; P95, interpolated to 90 % into
		// (100 ms, 250 ms], is capped by Max.
		{"two modes", append(repeat(ms, 50), repeat(200*ms, 50)...), ms, 200 * ms, 200 * ms},
		// Spread over (100 ms, 250 ms]: interpolated, not the bound.
		{"spread", spread(101*ms, 250*ms, 150), 175 * ms, 242500 * time.Microsecond, 250 * ms},
		{"none", nil, 0, 0, 0},
		// Beyond the largest bound: the estimate is that bound.
		{"overflow", repeat(7*time.Second, 4), 5 * time.Second, 5 * time.Second, 7 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var h Latency
			for _, d := range tc.waits {
				h.Observe(d)
			}
			ws := snapshot(&h)
			if ws.P50 != tc.p50 || ws.P95 != tc.p95 || ws.Max != tc.max {
				t.Fatalf("P50 %v P95 %v Max %v, want %v %v %v", ws.P50, ws.P95, ws.Max, tc.p50, tc.p95, tc.max)
			}
			if ws.P50 > ws.P95 || ws.P95 > ws.P99 {
				t.Fatalf("quantiles out of order: %v %v %v", ws.P50, ws.P95, ws.P99)
			}
		})
	}
}

func repeat(d time.Duration, n int) []time.Duration {
	s := make([]time.Duration, n)
	for i := range s {
		s[i] = d
	}
	return s
}

// spread returns n waits evenly spaced from lo to hi.
func spread(lo, hi time.Duration, n int) []time.Duration {
	s := make([]time.Duration, n)
	for i := range s {
		s[i] = lo + (hi-lo)*time.Duration(i)/time.Duration(n-1)
	}
	return s
}

// TestWaitCountsZeroWaits: a read that waited for nothing counts in the
// first bucket and adds nothing to sum or max.
func TestWaitCountsZeroWaits(t *testing.T) {
	var h Latency
	h.Observe(0)
	h.Observe(0)
	h.Observe(3 * time.Millisecond)
	ws := snapshot(&h)
	if ws.Count != 3 || ws.Buckets[0].Count != 2 || ws.Sum != 3*time.Millisecond || ws.Max != 3*time.Millisecond {
		t.Errorf("after two zero waits and one of 3ms: count %d, first bucket %d, sum %v, max %v; want 3, 2, 3ms, 3ms",
			ws.Count, ws.Buckets[0].Count, ws.Sum, ws.Max)
	}
}
