package lagtrack

import (
	"encoding/binary"
	"slices"
	"testing"
	"time"
)

// FuzzInterpolation feeds the tracker a run of samples of a primary whose
// position only grows, as any primary's does, and checks what the router
// relies on: PositionAt never goes back in time, stays within the kept
// samples and is exact on one; PassedAt answers exactly when the newest
// sample is past the position, and then within the kept samples' times.
// steps is read 6 bytes a sample: milliseconds since the previous one
// (0: the same instant, ignored) and bytes written since. fill samples
// come first, to push the ring around.
func FuzzInterpolation(f *testing.F) {
	f.Add([]byte{0, 0, 100, 0, 0, 0, 250, 0, 100, 0, 0, 0, 250, 0, 100, 0, 0, 0}, uint16(0), int32(300), uint64(150))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0}, uint16(0), int32(1), uint64(0))
	f.Add([]byte{255, 255, 255, 255, 255, 255, 0, 0, 1, 0, 0, 0, 7, 0, 0, 0, 0, 1}, uint16(1030), int32(-5), uint64(1<<40))
	f.Fuzz(func(t *testing.T, steps []byte, fill uint16, queryMs int32, replay uint64) {
		var l Tracker
		t0 := time.Unix(1000, 0)
		var kept []sample // what the ring holds, oldest first
		add := func(at time.Time, lsn uint64) {
			l.Add(at, lsn)
			if len(kept) == 0 || at.After(kept[len(kept)-1].at) {
				kept = append(kept, sample{at, lsn})
			}
		}
		at, lsn := t0, uint64(0)
		for range min(int(fill), 3*len(l.samples)) {
			add(at, lsn)
			at, lsn = at.Add(250*time.Millisecond), lsn+4096
		}
		for len(steps) >= 6 {
			at = at.Add(time.Duration(binary.LittleEndian.Uint16(steps)) * time.Millisecond)
			lsn += uint64(binary.LittleEndian.Uint32(steps[2:]))
			add(at, lsn)
			steps = steps[6:]
		}
		kept = kept[max(len(kept)-len(l.samples), 0):]

		// Query times: every kept sample, the midpoints between them, and
		// the fuzzer's own, in order.
		times := []time.Time{t0.Add(time.Duration(queryMs) * time.Millisecond)}
		for i, s := range kept {
			times = append(times, s.at)
			if i > 0 {
				times = append(times, kept[i-1].at.Add(s.at.Sub(kept[i-1].at)/2))
			}
		}
		slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
		var prev uint64
		for _, q := range times {
			pos, ok := l.PositionAt(q)
			if want := len(kept) > 0 && !q.Before(kept[0].at); ok != want {
				t.Fatalf("PositionAt(+%v) ok = %v, want %v", q.Sub(t0), ok, want)
			}
			if !ok {
				continue
			}
			if pos < prev {
				t.Fatalf("PositionAt(+%v) = %d: went back from %d", q.Sub(t0), pos, prev)
			}
			if pos < kept[0].lsn || pos > kept[len(kept)-1].lsn {
				t.Fatalf("PositionAt(+%v) = %d: outside the samples [%d, %d]", q.Sub(t0), pos, kept[0].lsn, kept[len(kept)-1].lsn)
			}
			if i := slices.IndexFunc(kept, func(s sample) bool { return s.at.Equal(q) }); i >= 0 && pos != kept[i].lsn {
				t.Fatalf("PositionAt(+%v) = %d on a sample of %d", q.Sub(t0), pos, kept[i].lsn)
			}
			prev = pos
		}

		for _, r := range []uint64{replay, replay % (lsn + 1)} {
			got, ok := l.PassedAt(r)
			if want := len(kept) > 0 && kept[len(kept)-1].lsn > r; ok != want {
				t.Fatalf("PassedAt(%d) ok = %v, want %v", r, ok, want)
			}
			if ok && (got.Before(kept[0].at) || got.After(kept[len(kept)-1].at)) {
				t.Fatalf("PassedAt(%d) = +%v: outside the samples [+%v, +%v]", r, got.Sub(t0), kept[0].at.Sub(t0), kept[len(kept)-1].at.Sub(t0))
			}
		}
	})
}
