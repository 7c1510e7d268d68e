package topologytest

import (
	"strings"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration"
)

// TestSyncStandbyExclusion: with synchronous_standby_names = 'replica1',
// pgreplica_exclude_sync_standby=true keeps replica 1 out of the read pool
// (NodeStatus says sync and why) while replica 2 serves every read; without
// the option both serve reads.
func TestSyncStandbyExclusion(t *testing.T) {
	c := startCluster(t, integration.Options{ExtraConf: []string{"synchronous_standby_names = 'replica1'"}})
	if want, got := "replica1", mustQuery(t, c, 0, "SHOW synchronous_standby_names"); got != want {
		t.Fatalf("synchronous_standby_names = %q, want %q", got, want)
	}
	for _, tc := range []struct {
		name    string
		exclude bool
	}{
		{"excluded", true},
		{"included", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, cn := open(t, c, "pgreplica_exclude_sync_standby="+map[bool]string{true: "true", false: "false"}[tc.exclude])
			ctx := testCtx(t, 30*time.Second)
			wctx, cancel := within(ctx, 5*time.Second)
			defer cancel()
			if err := waitFor(wctx, "the monitor to report replica 1 as sync", func() (bool, string) {
				ns := status(t, cn, c, 1)
				return ns.SyncState == "sync", describe(ns)
			}); err != nil {
				t.Fatal(err)
			}
			if err := c.WaitCaughtUp(ctx); err != nil {
				t.Fatal(err)
			}
			n1, n2 := status(t, cn, c, 1), status(t, cn, c, 2)
			if n2.SyncState != "async" {
				t.Errorf("replica 2: SyncState %q, want async: %s", n2.SyncState, describe(n2))
			}
			if !n2.Reads {
				t.Errorf("replica 2 should serve reads: %s", describe(n2))
			}
			if tc.exclude && (n1.Reads || !strings.Contains(n1.Why, "synchronous standby")) {
				t.Errorf("replica 1 (sync) with exclusion: %s; want Reads=false and Why naming the synchronous standby", describe(n1))
			}
			if !tc.exclude && !n1.Reads {
				t.Errorf("replica 1 (sync) without exclusion: %s; want Reads=true", describe(n1))
			}
			seen := spread(t, pgreplica.WithEventual(ctx), db, c, 30)
			t.Logf("exclude=%v: 30 eventual reads went to %v", tc.exclude, seen)
			switch {
			case tc.exclude && seen[2] != 30:
				t.Errorf("with the sync standby excluded, reads went to %v, want all 30 on replica 2", seen)
			case !tc.exclude && (seen[1] == 0 || seen[2] == 0):
				t.Errorf("without exclusion, reads went to %v, want both replicas", seen)
			}
			// Position reads too: a session write, then reads needing it.
			sess := pgreplica.NewSession()
			sctx := pgreplica.WithSession(ctx, sess)
			tbl := newTable(t, c)
			if _, err := db.ExecContext(sctx, "INSERT INTO "+tbl+" (seq) VALUES (1)"); err != nil {
				t.Fatal(err)
			}
			if seen := spread(t, sctx, db, c, 10); tc.exclude && seen[1] > 0 {
				t.Errorf("session reads went to the excluded sync standby: %v", seen)
			}
		})
	}
}

// mustQuery runs a one-value query on node i of c.
func mustQuery(t *testing.T, c *integration.Cluster, i int, sql string, args ...any) string {
	t.Helper()
	s, err := c.QueryString(testCtx(t, 10*time.Second), i, sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
