package checker

import (
	"strings"
	"testing"
	"time"
)

// TestCounterWorkload runs WorkloadCounter, the outside workload that
// found the monotonic-read hole the mixed one missed (a session saw
// version N on a replica, then N-1 on the primary: the primary may not
// show a commit a standby already shows), with its faults: replay on one
// replica at a time paused for 100-600 ms and resumed for 175-350 ms, no
// apply delay. Every pgreplica target must show no violation; the naive
// router shows them in the same conditions.
func TestCounterWorkload(t *testing.T) {
	cluster.Need(t)
	d := 10 * time.Second
	if *runDuration > 0 {
		d = *runDuration
	}
	for _, o := range []Options{{Target: TargetNaive}, {Target: TargetSession}, {Target: TargetProcess},
		{Target: TargetSession, Driver: "pq"}, {Target: TargetPgx}} {
		o.Duration, o.Logf, o.Workload, o.Keys = d, t.Logf, WorkloadCounter, 1
		o.Faults = Faults{PausesOnly: true, MinPause: 100 * time.Millisecond, MaxPause: 600 * time.Millisecond, Hold: 350 * time.Millisecond}
		t.Run(string(o.Target)+"/"+o.Driver, func(t *testing.T) {
			rep, err := Run(t.Context(), cluster, o)
			if rep != nil {
				var b strings.Builder
				rep.WriteDetails(&b, 3)
				t.Log(b.String())
			}
			if err != nil {
				t.Fatal(err)
			}
			if rep.Reads == 0 || rep.Writes == 0 {
				t.Fatalf("the workload did nothing: %d writes, %d reads", rep.Writes, rep.Reads)
			}
			n := len(rep.Violations)
			switch {
			case o.Target == TargetNaive && n == 0:
				t.Errorf("the naive router showed no violation: the faults did not bite")
			case o.Target != TargetNaive && n > 0:
				t.Errorf("%d consistency violations through pgreplica (details above)", n)
			}
		})
	}
}
