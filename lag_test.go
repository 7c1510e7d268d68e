package pgreplica

import (
	"testing"
	"time"
)

func TestLagTrackerPassedAt(t *testing.T) {
	var l lagTracker
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	if _, ok := l.passedAt(10); ok {
		t.Fatal("no samples: nothing passed")
	}
	l.add(ms(0), 100)
	l.add(ms(250), 200)
	l.add(ms(250), 999) // same instant: ignored
	l.add(ms(500), 300)
	for _, tc := range []struct {
		replay LSN
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
		got, ok := l.passedAt(tc.replay)
		if ok != tc.ok || !got.Equal(tc.want) {
			t.Errorf("passedAt(%d) = %v, %v; want %v, %v", tc.replay, got.Sub(t0), ok, tc.want.Sub(t0), tc.ok)
		}
	}
	// An idle primary: the position stops moving, a caught-up replica
	// has no lag however long it stays idle.
	l.add(ms(60_000), 300)
	if _, ok := l.passedAt(300); ok {
		t.Error("idle primary: a caught-up replica must show no lag")
	}
}

func TestReachableLSN(t *testing.T) {
	for _, tc := range []struct{ in, want LSN }{
		{0x1000018, 0x1000000}, // past a short page header
		{0x1002018, 0x1002000},
		{0x1000028, 0x1000000}, // past a segment's long header
		{0x1002028, 0x1002028}, // 40 bytes into a page that is not a segment start: data
		{0x1002019, 0x1002019},
		{0x1002000, 0x1002000},
	} {
		if got := reachableLSN(tc.in); got != tc.want {
			t.Errorf("reachableLSN(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

func TestPrimaryPositionAt(t *testing.T) {
	var l lagTracker
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	if _, ok := l.positionAt(t0); ok {
		t.Fatal("a position without samples")
	}
	l.add(ms(0), 1000)
	l.add(ms(100), 2000)
	l.add(ms(200), 2000) // idle
	for _, tc := range []struct {
		at   time.Time
		want LSN
		ok   bool
	}{
		{ms(-1), 0, false},
		{ms(0), 1000, true},
		{ms(50), 1500, true}, // interpolated
		{ms(150), 2000, true},
		{ms(900), 2000, true}, // after the newest: the newest
	} {
		got, ok := l.positionAt(tc.at)
		if got != tc.want || ok != tc.ok {
			t.Errorf("positionAt(+%v) = %v, %v; want %v, %v", tc.at.Sub(t0), got, ok, tc.want, tc.ok)
		}
	}
}
