package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
)

func TestDemoTable(t *testing.T) {
	st := mergeStats(pgreplica.Stats{
		ReplicaReads: 90, FallbackReads: 10,
		Fallbacks: map[string]int64{pgreplica.ReasonTimeout: 10, pgreplica.ReasonNoReplica: 0},
		Wait: pgreplica.WaitStats{Count: 100, Buckets: []pgreplica.Bucket{
			{UpperBound: 50 * time.Millisecond, Count: 60}, {UpperBound: 100 * time.Millisecond, Count: 96}, {UpperBound: 250 * time.Millisecond, Count: 100}}},
	})
	res := demoResult{runs: 30, budget: 150 * time.Millisecond,
		naive: routerResult{bad: []int{30, 29, 12, 30, 28}, reads: 100, elapsed: 2 * time.Second},
		pgr:   routerResult{bad: make([]int, len(scenarios)), reads: 100, elapsed: 3 * time.Second, stats: &st},
	}
	var b bytes.Buffer
	if err := renderDemo(&b, res); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	t.Log("\n" + out)
	for _, want := range []string{
		"(a) save, redirect, read it back", "30 of 30", "12 of 30", "0 of 30",
		"100% of 100", "90% of 100", "~41ms / ~98ms", "no_replica 0, timeout 10",
		"in 129 of 150 runs", "pgreplica showed none",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("demo table lacks %q", want)
		}
	}
}

func TestPercent(t *testing.T) {
	for _, c := range []struct {
		part, whole int64
		want        string
	}{{0, 0, "-"}, {0, 7, "0%"}, {7, 7, "100%"}, {209, 210, "99.5%"}, {1, 1000, "0.1%"}, {90, 100, "90%"}} {
		if got := percent(c.part, c.whole); got != c.want {
			t.Errorf("percent(%d, %d) = %q, want %q", c.part, c.whole, got, c.want)
		}
	}
}

func TestStatsSince(t *testing.T) {
	before := pgreplica.Stats{ReplicaReads: 5, Fallbacks: map[string]int64{"timeout": 1},
		Wait: pgreplica.WaitStats{Count: 2, Buckets: []pgreplica.Bucket{{UpperBound: time.Millisecond, Count: 2}, {UpperBound: time.Second, Count: 2}}}}
	after := pgreplica.Stats{ReplicaReads: 9, Fallbacks: map[string]int64{"timeout": 3},
		Wait: pgreplica.WaitStats{Count: 6, Buckets: []pgreplica.Bucket{{UpperBound: time.Millisecond, Count: 2}, {UpperBound: time.Second, Count: 6}}}}
	d := statsSince(after, before)
	if d.ReplicaReads != 4 || d.Fallbacks["timeout"] != 2 || d.Wait.Count != 4 || d.Wait.P50 != 500500*time.Microsecond { // interpolated in (1ms, 1s]
		t.Errorf("statsSince = %+v", d)
	}
}
