package histogram

import (
	"encoding/binary"
	"slices"
	"testing"
	"time"
)

// FuzzQuantile observes the fuzzer's waits (4 bytes each, in
// microseconds, scaled by shift so that every bucket is reachable) and
// checks the histogram against them: the counts, sum and max are exact,
// and each estimate lies in the bucket that holds the true quantile,
// never above the longest wait, and never decreases as q grows.
func FuzzQuantile(f *testing.F) {
	f.Add([]byte{150, 0, 0, 0, 150, 0, 0, 0}, uint8(10), uint16(32767))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}, uint8(0), uint16(0))
	f.Add([]byte{255, 255, 255, 255, 7, 0, 0, 0}, uint8(12), uint16(65535))
	f.Fuzz(func(t *testing.T, raw []byte, shift uint8, qn uint16) {
		var h Latency
		var waits []time.Duration
		var sum, longest time.Duration
		for ; len(raw) >= 4; raw = raw[4:] {
			// Signed: a wait measured on a clock that stepped back is
			// below zero, and counts as none.
			d := time.Duration(int32(binary.LittleEndian.Uint32(raw))) * time.Microsecond >> (shift % 16)
			waits = append(waits, d)
			h.Observe(d)
			if d > 0 {
				sum += d
				longest = max(longest, d)
			}
		}
		cum, count, gotSum, gotMax := h.Load()
		if count != int64(len(waits)) || gotSum != sum || gotMax != longest {
			t.Fatalf("count %d sum %v max %v; want %d %v %v", count, gotSum, gotMax, len(waits), sum, longest)
		}
		for i, c := range cum {
			var want int64
			for _, d := range waits {
				if d <= Bounds[i] {
					want++
				}
			}
			if c != want {
				t.Fatalf("bucket ≤ %v: %d, want %d", Bounds[i], c, want)
			}
		}
		bucket := func(i int) (time.Duration, int64) { return Bounds[i], cum[i] }
		slices.Sort(waits)
		qs := []float64{(float64(qn) + 1) / 65536, 0.5, 0.95, 0.99, 1}
		slices.Sort(qs)
		var prev time.Duration
		for _, q := range qs {
			est := Quantile(q, count, gotMax, len(cum), bucket)
			if len(waits) == 0 {
				if est != 0 {
					t.Fatalf("Quantile(%v) of nothing = %v", q, est)
				}
				continue
			}
			// The true quantile: the observation of rank ⌈q·count⌉.
			rank := max(int(q*float64(count)+0.999999999), 1)
			v := waits[min(rank, len(waits))-1]
			lo, hi := time.Duration(0), Bounds[len(Bounds)-1]
			if i := slices.IndexFunc(Bounds[:], func(b time.Duration) bool { return v <= b }); i >= 0 {
				hi = Bounds[i]
				if i > 0 {
					lo = Bounds[i-1]
				}
			} else {
				lo = hi
			}
			if gotMax > 0 {
				hi = min(hi, gotMax)
			}
			if est < lo || est > hi {
				t.Fatalf("Quantile(%v) = %v; the true %v is in (%v, %v]", q, est, v, lo, hi)
			}
			if est < prev {
				t.Fatalf("Quantile(%v) = %v: below a lower quantile's %v", q, est, prev)
			}
			prev = est
		}
	})
}
