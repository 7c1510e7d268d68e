package topologytest

import (
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
)

// TestLeastLagPolicy: with replica 1 delayed by 500 ms under steady writes,
// least_lag sends every eventual read to replica 2.
func TestLeastLagPolicy(t *testing.T) {
	db, cn := open(t, cluster, "pgreplica_policy=least_lag")
	ctx := testCtx(t, 60*time.Second)
	tbl := newTable(t, cluster)
	awaitCaughtUp(t, ctx, cluster, cn)
	setApplyDelay(t, cluster, 1, 500*time.Millisecond)
	w := startWriter(t, db, tbl, 20*time.Millisecond)
	wctx, cancel := within(ctx, 5*time.Second)
	defer cancel()
	if err := waitFor(wctx, "replica 1 to fall behind", func() (bool, string) {
		ns := status(t, cn, cluster, 1)
		return ns.LagTime > 200*time.Millisecond, describe(ns)
	}); err != nil {
		t.Fatal(err)
	}
	seen := map[int]int{}
	for range 30 {
		before := describe(status(t, cn, cluster, 1)) + " / " + describe(status(t, cn, cluster, 2))
		n, err := servedBy(pgreplica.WithEventual(ctx), db, cluster)
		if err != nil {
			t.Fatal(err)
		}
		seen[n]++
		if n != 2 {
			t.Errorf("least_lag read went to node %d; statuses just before: %s", n, before)
		}
	}
	w.stop(t)
	t.Logf("least_lag: 30 reads went to %v", seen)
}

// TestSpreadingPolicies: round_robin, random and latency use both caught-up
// replicas (and never the primary).
func TestSpreadingPolicies(t *testing.T) {
	for _, tc := range []struct {
		policy string
		min    int // reads each replica must get out of 100
	}{
		{"round_robin", 45},
		{"random", 25},
		{"latency", 20},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			db, cn := open(t, cluster, "pgreplica_policy="+tc.policy)
			ctx := testCtx(t, 30*time.Second)
			awaitCaughtUp(t, ctx, cluster, cn)
			seen := spread(t, pgreplica.WithEventual(ctx), db, cluster, 100)
			t.Logf("%s: %v", tc.policy, seen)
			if seen[0] > 0 || seen[1] < tc.min || seen[2] < tc.min {
				t.Errorf("%s: 100 reads went to %v, want at least %d on each replica and none on the primary; statuses: %s / %s",
					tc.policy, seen, tc.min, describe(status(t, cn, cluster, 1)), describe(status(t, cn, cluster, 2)))
			}
		})
	}
}

// TestProbeRTT: the round trip the latency policy compares is a query's,
// a few milliseconds on loopback, not a connection set-up's. The first
// probe on a new connection is not timed, so wait for the second.
func TestProbeRTT(t *testing.T) {
	const bound = 50 * time.Millisecond
	_, cn := open(t, cluster)
	for i := range cluster.Len() {
		deadline := time.Now().Add(5 * time.Second)
		ns := status(t, cn, cluster, i)
		for ns.RTT == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond) // the monitor's next probe is not observable otherwise
			ns = status(t, cn, cluster, i)
		}
		if ns.RTT <= 0 || ns.RTT > bound {
			t.Errorf("node %d: RTT %v, want a loopback query round trip (0, %v]: %s", i, ns.RTT, bound, describe(ns))
		}
	}
}
