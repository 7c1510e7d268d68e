package pgreplica

import (
	"testing"
	"time"

	"github.com/pgreplica/pgreplica/internal/histogram"
)

// TestWaitStatsCopiesHistogram: Stats.Wait is the wait histogram as it
// was recorded, bucket for bucket (the estimates themselves are tested in
// internal/histogram).
func TestWaitStatsCopiesHistogram(t *testing.T) {
	var h histogram.Latency
	h.Observe(0)
	h.Observe(3 * time.Millisecond)
	h.Observe(7 * time.Second)
	ws := waitStats(&h)
	if ws.Count != 3 || ws.Sum != 7003*time.Millisecond || ws.Max != 7*time.Second || len(ws.Buckets) != len(histogram.Bounds) {
		t.Fatalf("count %d, sum %v, max %v, %d buckets; want 3, 7.003s, 7s, %d", ws.Count, ws.Sum, ws.Max, len(ws.Buckets), len(histogram.Bounds))
	}
	for i, b := range ws.Buckets {
		want := int64(1) // the zero wait
		if b.UpperBound >= 3*time.Millisecond {
			want = 2
		}
		if b.UpperBound != histogram.Bounds[i] || b.Count != want {
			t.Errorf("bucket %d: ≤ %v: %d; want ≤ %v: %d", i, b.UpperBound, b.Count, histogram.Bounds[i], want)
		}
	}
	if ws.P50 != ws.Quantile(0.50) || ws.P95 != ws.Quantile(0.95) || ws.P99 != ws.Quantile(0.99) || ws.P99 != 5*time.Second {
		t.Errorf("P50 %v P95 %v P99 %v; want WaitStats.Quantile's, P99 the largest bound", ws.P50, ws.P95, ws.P99)
	}
}
