package topologytest

import (
	"strings"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
)

// TestPausedReplicaRouting: a replica whose replay is paused is bypassed
// by reads that need a session's write (replica 2 serves them), and still
// serves eventual reads as long as its lag is within pgreplica_max_lag:
// both replicas before the primary moves past it, only replica 2 once its
// lag exceeds the bound, both again after ResumeReplay.
func TestPausedReplicaRouting(t *testing.T) {
	const maxLag = 200 * time.Millisecond
	db, cn := open(t, cluster, "pgreplica_max_lag=200ms")
	ctx := testCtx(t, 60*time.Second)
	tbl := newTable(t, cluster)
	ev := pgreplica.WithEventual(ctx)

	// Paused but nothing written since: replica 1 is as fresh as any. The
	// server may write on its own meanwhile (autovacuum, the bgwriter's
	// RUNNING_XACTS), and then replica 1 really is behind: try again.
	for attempt := 1; ; attempt++ {
		awaitCaughtUp(t, ctx, cluster, cn)
		pauseReplay(t, cluster, 1)
		seen := spread(t, ev, db, cluster, 40)
		ns := status(t, cn, cluster, 1)
		if ns.LagBytes == 0 {
			if seen[1] == 0 || seen[2] == 0 || seen[0] > 0 {
				t.Errorf("eventual reads with replica 1 paused but caught up went to %v, want both replicas", seen)
			}
			break
		}
		if attempt == 3 {
			t.Logf("the primary kept moving while replica 1 was paused (%s): not asserting that both replicas served", describe(ns))
			break
		}
		if err := cluster.ResumeReplay(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}

	// A session write: replica 1 cannot have it.
	sess := pgreplica.NewSession()
	sctx := pgreplica.WithSession(ctx, sess)
	if _, err := db.ExecContext(sctx, "INSERT INTO "+tbl+" (seq) VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	tok, err := pgreplica.ParseToken(sess.Token())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		read func() (node int, err error)
	}{
		{"session", func() (int, error) { return servedBy(sctx, db, cluster) }},
		{"token", func() (int, error) { return servedBy(pgreplica.WithToken(ctx, tok), db, cluster) }},
	} {
		seen := map[int]int{}
		for range 10 {
			n, err := tc.read()
			if err != nil {
				t.Fatalf("%s read: %v", tc.name, err)
			}
			seen[n]++
		}
		if seen[2] != 10 {
			t.Errorf("%s reads after the write went to %v, want all 10 on replica 2", tc.name, seen)
		}
	}

	// Writes go on: once the primary passed replica 1 by more than the
	// bound, eventual reads leave it.
	w := startWriter(t, db, tbl, 20*time.Millisecond)
	wctx, cancel := within(ctx, 3*time.Second)
	defer cancel()
	if err := waitFor(wctx, "replica 1's lag to exceed "+maxLag.String(), func() (bool, string) {
		ns := status(t, cn, cluster, 1)
		return ns.LagTime > maxLag, describe(ns)
	}); err != nil {
		t.Fatal(err)
	}
	ns := status(t, cn, cluster, 1)
	if ns.Reads || !strings.Contains(ns.Why, "lag") || !ns.ReplayPaused {
		t.Errorf("replica 1 beyond the lag bound: %s; want Reads=false, ReplayPaused, Why naming the lag", describe(ns))
	}
	wrote := w.ok.Load()
	seen := spread(t, ev, db, cluster, 30)
	t.Logf("eventual reads with replica 1 beyond max_lag: %v (node: count); background writes so far: %d", seen, wrote)
	if seen[1] > 0 {
		t.Errorf("%d eventual reads went to replica 1, whose lag exceeds pgreplica_max_lag", seen[1])
	}
	if seen[0] > 0 {
		t.Errorf("%d eventual reads fell back to the primary although replica 2 was caught up; statuses: %s / %s",
			seen[0], describe(status(t, cn, cluster, 1)), describe(status(t, cn, cluster, 2)))
	}

	if err := cluster.ResumeReplay(ctx, 1); err != nil {
		t.Fatal(err)
	}
	wctx, cancel = within(ctx, 3*time.Second)
	defer cancel()
	if err := waitFor(wctx, "replica 1 back in the read pool", func() (bool, string) {
		ns := status(t, cn, cluster, 1)
		return ns.Reads && !ns.ReplayPaused, describe(ns)
	}); err != nil {
		t.Fatal(err)
	}
	w.stop(t)
	awaitCaughtUp(t, ctx, cluster, cn)
	if seen := spread(t, ev, db, cluster, 40); seen[1] == 0 || seen[2] == 0 || seen[0] > 0 {
		t.Errorf("eventual reads after resume went to %v, want both replicas", seen)
	}
}
