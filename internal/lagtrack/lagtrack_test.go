package lagtrack

import (
	"testing"
	"time"
)

func TestLagTrackerPassedAt(t *testing.T) {
	var l Tracker
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	if _, ok := l.PassedAt(10); ok {
		t.Fatal("no samples: nothing passed")
	}
	l.Add(ms(0), 100)
	l.Add(ms(250), 200)
	l.Add(ms(250), 999) // same instant: ignored
	l.Add(ms(500), 300)
	for _, tc := range []struct {
		replay uint64
		want   time.Time
		ok     bool
	}{
		{300, time.Time{}, false}, // caught up
		{400, time.Time{}, false}, // ahead of the last sample
		{250, ms(375), true},      // interpolated
		{200, ms(500), true},      // on a sample: passed at the next one
		{150, ms(125), true},
		{50, ms(0), true},    // behind every sample: the oldest is a lower bound
		{100, ms(250), true}, // on the oldest sample
	} {
		got, ok := l.PassedAt(tc.replay)
		if ok != tc.ok || !got.Equal(tc.want) {
			t.Errorf("passedAt(%d) = %v, %v; want %v, %v", tc.replay, got.Sub(t0), ok, tc.want.Sub(t0), tc.ok)
		}
	}
	// An idle primary: the position stops moving, a caught-up replica
	// has no lag however long it stays idle.
	l.Add(ms(60_000), 300)
	if _, ok := l.PassedAt(300); ok {
		t.Error("idle primary: a caught-up replica must show no lag")
	}
}

func TestPrimaryPositionAt(t *testing.T) {
	var l Tracker
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	if _, ok := l.PositionAt(t0); ok {
		t.Fatal("a position without samples")
	}
	l.Add(ms(0), 1000)
	l.Add(ms(100), 2000)
	l.Add(ms(200), 2000) // idle
	for _, tc := range []struct {
		at   time.Time
		want uint64
		ok   bool
	}{
		{ms(-1), 0, false},
		{ms(0), 1000, true},
		{ms(50), 1500, true}, // interpolated
		{ms(150), 2000, true},
		{ms(900), 2000, true}, // after the newest: the newest
	} {
		got, ok := l.PositionAt(tc.at)
		if got != tc.want || ok != tc.ok {
			t.Errorf("positionAt(+%v) = %v, %v; want %v, %v", tc.at.Sub(t0), got, ok, tc.want, tc.ok)
		}
	}
}

// TestRingKeepsNewest: past the ring's size the oldest samples go, and
// the estimates read only what is kept.
func TestRingKeepsNewest(t *testing.T) {
	var l Tracker
	t0 := time.Unix(1000, 0)
	n := len(l.samples) + 10
	for i := range n {
		l.Add(t0.Add(time.Duration(i)*time.Second), uint64(i)*100)
	}
	oldest := n - len(l.samples)
	if _, ok := l.PositionAt(t0.Add(time.Duration(oldest)*time.Second - 1)); ok {
		t.Error("a position before the oldest kept sample")
	}
	if pos, ok := l.PositionAt(t0.Add(time.Duration(oldest)*time.Second + time.Second/2)); !ok || pos != uint64(oldest)*100+50 {
		t.Errorf("PositionAt half a second after the oldest kept sample = %d, %v; want %d", pos, ok, oldest*100+50)
	}
	if at, ok := l.PassedAt(0); !ok || !at.Equal(t0.Add(time.Duration(oldest)*time.Second)) {
		t.Errorf("PassedAt(0) = %v, %v; want the oldest kept sample's time", at.Sub(t0), ok)
	}
}

// TestAddAtLeast: a lower bound below the newest sample is raised to it;
// a plain sample is kept as it is; an older sample of either kind is
// dropped.
func TestAddAtLeast(t *testing.T) {
	var l Tracker
	t0 := time.Unix(1000, 0)
	l.Add(t0, 100)
	l.AddAtLeast(t0.Add(time.Second), 90)
	if pos, _ := l.PositionAt(t0.Add(time.Second)); pos != 100 {
		t.Errorf("lower bound 90 after 100: position %d, want 100", pos)
	}
	l.AddAtLeast(t0.Add(2*time.Second), 300)
	if pos, _ := l.PositionAt(t0.Add(2 * time.Second)); pos != 300 {
		t.Errorf("lower bound 300: position %d, want 300", pos)
	}
	l.AddAtLeast(t0.Add(time.Second/2), 1000)
	if pos, _ := l.PositionAt(t0.Add(2 * time.Second)); pos != 300 {
		t.Errorf("an older lower bound changed the newest position to %d", pos)
	}
}

func TestLagTrackerReachedAt(t *testing.T) {
	var l Tracker
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	if _, ok := l.ReachedAt(10); ok {
		t.Fatal("no samples: nothing reached")
	}
	l.Add(ms(0), 100)
	l.Add(ms(250), 200)
	l.Add(ms(500), 300)
	l.Add(ms(60_000), 300) // then idle for a minute
	for _, tc := range []struct {
		pos  uint64
		want time.Time
		ok   bool
	}{
		{301, time.Time{}, false}, // ahead of the last sample
		{300, ms(500), true},      // the idle primary's position: reached long ago, never passed
		{250, ms(375), true},      // interpolated
		{200, ms(250), true},      // on a sample: reached then
		{150, ms(125), true},
		{100, ms(0), true}, // on the oldest sample
		{50, ms(0), true},  // below every sample: the oldest is an upper bound
	} {
		got, ok := l.ReachedAt(tc.pos)
		if ok != tc.ok || !got.Equal(tc.want) {
			t.Errorf("ReachedAt(%d) = %v, %v; want %v, %v", tc.pos, got.Sub(t0), ok, tc.want.Sub(t0), tc.ok)
		}
	}
	if _, ok := l.PassedAt(300); ok {
		t.Error("PassedAt(300) on the idle primary's position: nothing passed it")
	}
}
