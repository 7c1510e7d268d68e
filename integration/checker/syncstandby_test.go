package checker

import (
	"strings"
	"testing"
	"time"
)

// TestConsistencySyncStandby runs the workload with a synchronous standby
// whose replay the injector pauses and delays, and commits that wait for
// it to apply them (Faults.SyncStandby): the asynchronous replica shows a
// commit for as long as the primary still hides it. A session that read a
// row there and then reads it on the primary (its read right after its own
// write goes there when no replica is predicted to have the write as
// soon) must not see the row go back. Without the
// primary's check (pgreplica's visibility.go) sessions saw a version on
// the replica, then the one before it on the primary.
func TestConsistencySyncStandby(t *testing.T) {
	cluster.Need(t)
	d := 12 * time.Second
	if *runDuration > 0 {
		d = *runDuration
	}
	var waits int64
	for _, o := range []Options{{Target: TargetSession}, {Target: TargetSession, Driver: "pq"}, {Target: TargetPgx}} {
		o.Duration, o.Logf = d, t.Logf
		o.Faults.SyncStandby = true
		name := string(o.Target) + "/" + o.Driver
		t.Run(name, func(t *testing.T) {
			rep, err := Run(t.Context(), cluster, o)
			if rep != nil {
				var b strings.Builder
				rep.WriteDetails(&b, 5)
				t.Log(b.String())
			}
			if err != nil {
				t.Fatal(err)
			}
			if rep.Reads == 0 || rep.Writes == 0 {
				t.Fatalf("the workload did nothing: %d writes, %d reads", rep.Writes, rep.Reads)
			}
			if n := len(rep.Violations); n > 0 {
				t.Errorf("%d consistency violations through pgreplica (details above)", n)
			}
			if rep.Stats != nil {
				t.Logf("%s: %d session reads on the primary waited for it to show what a replica showed", name, rep.Stats.PrimaryVisibilityWaits)
				waits += rep.Stats.PrimaryVisibilityWaits
			}
		})
	}
	// The window opens by chance (from 0 to a few dozen times a run, in
	// each front door alike): the test has exercised the check when it
	// opened in any of them.
	if waits == 0 {
		t.Errorf("no session read on the primary waited for it to show what a replica showed: the window was never open")
	}
}
