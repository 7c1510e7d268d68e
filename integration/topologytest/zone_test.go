package topologytest

import (
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
)

// TestZonePreference: a client in zone b with hosts in zones a, a, b sends
// eventual reads to node 2 (its zone) only; when node 2 is paused and lags
// beyond pgreplica_max_lag they go to node 1, the other zone's replica.
func TestZonePreference(t *testing.T) {
	const maxLag = 200 * time.Millisecond
	db, cn := open(t, cluster, "pgreplica_zone=b", "pgreplica_zones=a,a,b", "pgreplica_max_lag=200ms")
	ctx := testCtx(t, 60*time.Second)
	tbl := newTable(t, cluster)
	for i, want := range []string{"a", "a", "b"} {
		if ns := status(t, cn, cluster, i); ns.Zone != want {
			t.Errorf("node %d: Zone %q, want %q", i, ns.Zone, want)
		}
	}
	awaitCaughtUp(t, ctx, cluster, cn)
	ev := pgreplica.WithEventual(ctx)
	if seen := spread(t, ev, db, cluster, 20); seen[2] != 20 {
		t.Errorf("eventual reads from zone b went to %v, want all 20 on node 2 (zone b)", seen)
	}

	pauseReplay(t, cluster, 2)
	w := startWriter(t, db, tbl, 20*time.Millisecond)
	wctx, cancel := within(ctx, 3*time.Second)
	defer cancel()
	if err := waitFor(wctx, "node 2's lag to exceed "+maxLag.String(), func() (bool, string) {
		ns := status(t, cn, cluster, 2)
		return ns.LagTime > maxLag, describe(ns)
	}); err != nil {
		t.Fatal(err)
	}
	seen := spread(t, ev, db, cluster, 20)
	if seen[1] != 20 {
		t.Errorf("eventual reads with node 2 lagging went to %v, want all 20 on node 1 (the other zone's replica); statuses: %s / %s",
			seen, describe(status(t, cn, cluster, 1)), describe(status(t, cn, cluster, 2)))
	}
	w.stop(t)
}
