package prober

import (
	"testing"
	"time"
)

// TestTrafficStandsInForThePrimarysProbe: the primary's probe is left out
// while its pools lent connections since the last look and the last probe
// is younger than two idle intervals; never for a replica, a failed host,
// without statements, or once the last probe is that old.
func TestTrafficStandsInForThePrimarysProbe(t *testing.T) {
	p := New(Key{}, Config{})
	now := time.Now()
	for _, tc := range []struct {
		name   string
		st     *Status
		lent   int64 // at the last look 10; now:
		probed time.Duration
		want   bool
	}{
		{"primary, statements ran, recent probe", &Status{Role: Primary}, 12, 300 * time.Millisecond, true},
		{"primary, no statement since", &Status{Role: Primary}, 10, 300 * time.Millisecond, false},
		{"primary, last probe an idle interval ago", &Status{Role: Primary}, 12, time.Second, true},
		{"primary, last probe two idle intervals ago", &Status{Role: Primary}, 12, 2 * time.Second, false},
		{"replica", &Status{Role: Replica}, 12, 10 * time.Millisecond, false},
		{"failed primary", &Status{Role: Primary, Err: ErrNoConn}, 12, 10 * time.Millisecond, false},
		{"never probed", nil, 12, 10 * time.Millisecond, false},
	} {
		p.last, p.lent = tc.st, 10
		if got := p.trafficStandsIn(now.Add(-tc.probed), time.Second, tc.lent); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestCaptureStandsInForThePrimarysProbe: the primary's probe is left out
// while a capture read its position within the interval and the last
// probe is younger than two idle intervals; never for a replica, a failed
// host, after a stale capture or once the last probe is that old.
func TestCaptureStandsInForThePrimarysProbe(t *testing.T) {
	p := New(Key{}, Config{})
	now := time.Now()
	for _, tc := range []struct {
		name     string
		st       *Status
		captured time.Duration // ago; 0: never
		probed   time.Duration // ago
		want     bool
	}{
		{"primary, fresh capture, recent probe", &Status{Role: Primary}, 10 * time.Millisecond, 300 * time.Millisecond, true},
		{"primary, capture older than the interval", &Status{Role: Primary}, 300 * time.Millisecond, 300 * time.Millisecond, false},
		{"primary, last probe an idle interval ago", &Status{Role: Primary}, 10 * time.Millisecond, time.Second, true},
		{"primary, last probe two idle intervals ago", &Status{Role: Primary}, 10 * time.Millisecond, 2 * time.Second, false},
		{"primary, never captured", &Status{Role: Primary}, 0, 10 * time.Millisecond, false},
		{"replica", &Status{Role: Replica}, 10 * time.Millisecond, 10 * time.Millisecond, false},
		{"failed primary", &Status{Role: Primary, Err: ErrNoConn}, 10 * time.Millisecond, 10 * time.Millisecond, false},
		{"never probed", nil, 10 * time.Millisecond, 10 * time.Millisecond, false},
	} {
		p.last = tc.st
		p.capturedAt.Store(0)
		if tc.captured != 0 {
			p.capturedAt.Store(now.Add(-tc.captured).UnixNano())
		}
		if got := p.captureStandsIn(now.Add(-tc.probed), 250*time.Millisecond, time.Second); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
