package main

import (
	"bytes"
	"testing"
	"time"
)

// TestDemoNaiveSeesStaleReadsPgreplicaNone plays the demo's scenarios,
// fewer times, on the shared cluster.
func TestDemoNaiveSeesStaleReadsPgreplicaNone(t *testing.T) {
	cluster.Need(t)
	ctx := testCtx(t, 2*time.Minute)
	o := defaultDemoOptions()
	o.runs, o.users, o.restore = 8, 4, true
	var out bytes.Buffer
	res, err := play(ctx, cluster, o, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if err := renderDemo(&out, res); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	if res.naive.totalBad() == 0 {
		t.Error("the naive router read nothing stale from replicas 50ms and 800ms behind")
	}
	if n := res.pgr.totalBad(); n != 0 {
		t.Errorf("pgreplica let %d runs see stale or vanishing data: %v", n, res.pgr.bad)
	}
	if st := res.pgr.stats; st == nil || st.ReplicaReads == 0 {
		t.Error("pgreplica served no read from a replica")
	}
	// The demo leaves the replicas without delay for the next test.
	for _, i := range []int{1, 2} {
		got, err := cluster.QueryString(ctx, i, "SHOW recovery_min_apply_delay")
		if err != nil || got != "0" {
			t.Errorf("replica %d: recovery_min_apply_delay = %q, %v; want 0", i, got, err)
		}
	}
}
