//go:build linux

package patroni_test

import (
	"testing"
	"time"

	"github.com/pgreplica/pgreplica/integration/patroni"
)

// TestWriterUpAfter: the moment HAProxy's writer port had a member up is
// the first change that put it there at or after t, or t itself when it
// was up already.
func TestWriterUpAfter(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	changes := []patroni.WriterChange{
		{At: at(0), Up: []int{0}},
		{At: at(100), Up: nil},
		{At: at(900), Up: []int{1}},
		{At: at(2000), Up: nil},
		{At: at(2500), Up: []int{0}},
	}
	for _, tc := range []struct {
		name string
		t    int
		m    int
		want int // -1: never
	}{
		{"up later", 150, 1, 900},
		{"up already", 50, 0, 50},
		{"up already, long after the change", 1500, 1, 1500},
		{"taken out, back later", 150, 0, 2500},
		{"never after t", 2100, 1, -1},
		{"never", 0, 2, -1},
	} {
		got, ok := patroni.WriterUpAfter(changes, at(tc.t), tc.m)
		switch {
		case tc.want < 0 && ok:
			t.Errorf("%s: m%d up at %v, want never", tc.name, tc.m, got.Sub(t0))
		case tc.want >= 0 && (!ok || !got.Equal(at(tc.want))):
			t.Errorf("%s: m%d up at %v (%v), want %v", tc.name, tc.m, got.Sub(t0), ok, at(tc.want).Sub(t0))
		}
	}
}
