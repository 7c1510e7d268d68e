package pgreplica

import (
	"testing"
	"time"
)

func TestParseDelay(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"0": 0, "300ms": 300 * time.Millisecond, "2s": 2 * time.Second, "1min": time.Minute, "5": 5 * time.Millisecond,
	} {
		if got, err := parseDelay(in); err != nil || got != want {
			t.Errorf("parseDelay(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "ms", "3 parsecs", "1x"} {
		if _, err := parseDelay(bad); err == nil {
			t.Errorf("parseDelay(%q) accepted", bad)
		}
	}
}
