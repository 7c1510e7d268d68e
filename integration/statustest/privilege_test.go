package statustest

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

// needsMonitor is what the command shows for state PostgreSQL hides from
// a role without pg_read_all_stats (pgreplica.StatusNeedsMonitor).
const needsMonitor = "unknown (needs pg_monitor)"

// TestStatusAsPlainRole runs the status command as a LOGIN role with no
// monitoring privileges: healthy replicas show their receiver state and
// sync state as unknown, not as "no receiver", and still take reads, in
// JSON and in the table.
func TestStatusAsPlainRole(t *testing.T) {
	cluster.Need(t)
	ctx := testCtx(t, 60*time.Second)
	if err := cluster.Exec(ctx, cluster.Primary(), `DO $$ BEGIN
		IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'status_app') THEN CREATE ROLE status_app LOGIN; END IF;
	END $$`); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	dsn := strings.Replace(cluster.DSN(), "postgres://postgres@", "postgres://status_app@", 1)
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", cluster.Port(i)) }

	by, _ := statusJSON(t, ctx, dsn)
	if p := by[addr(0)]; p.Role != "primary" || p.State != "ok" || p.Timeline == 0 {
		t.Errorf("primary row: %+v", p)
	}
	for i := 1; i <= 2; i++ {
		r := by[addr(i)]
		if r.Role != "replica" || r.State != needsMonitor || r.SyncState != needsMonitor || r.Error != "" || !r.Reads || r.Timeline == 0 {
			t.Errorf("replica %d row as a plain role: %+v; want state and sync_state %q, reads", i, r, needsMonitor)
		}
	}

	var out, errOut bytes.Buffer
	if code := run(ctx, []string{"status", dsn}, &out, &errOut); code != exitOK {
		t.Fatalf("exit code %d; stderr:\n%s", code, errOut.String())
	}
	t.Log("\n" + out.String())
	if s := out.String(); strings.Contains(s, "writes:") {
		t.Errorf("status as a plain role reports a failure of writes:\n%s", s)
	}
	for _, r := range columns(t, out.String()) {
		if r["ROLE"] == "replica" && (r["STATE"] != needsMonitor || r["SYNC"] != needsMonitor) {
			t.Errorf("replica row: %v", r)
		}
	}
}
