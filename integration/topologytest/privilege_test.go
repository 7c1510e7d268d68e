package topologytest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration"
	"github.com/pgreplica/pgreplica/integration/itest"
)

// TestUnprivilegedRole connects as "app", a plain LOGIN role without
// superuser. PostgreSQL hides the WAL receiver's state and the standbys'
// sync_state (here of a synchronous standby too) from it: Nodes says so
// instead of "no receiver", the warning is logged once, routing works as
// for any role, functions revoked from PUBLIC are done without or fail
// loudly, and after a failover a replica gets reads once a restartpoint
// shows its new timeline.
func TestUnprivilegedRole(t *testing.T) {
	c := startCluster(t, integration.Options{ExtraConf: []string{"synchronous_standby_names = 'replica1'"}})
	ctx := testCtx(t, 3*time.Minute)
	if err := c.Exec(ctx, 0, `CREATE ROLE app LOGIN;
		CREATE TABLE priv_t (seq bigint NOT NULL); GRANT ALL ON priv_t TO app`); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}

	t.Run("plain role: status and routing", func(t *testing.T) {
		logs := &warnings{}
		db, cn := openAs(t, c, "app", logs)
		awaitCaughtUp(t, ctx, c, cn)
		for i := 1; i <= 2; i++ {
			ns := status(t, cn, c, i)
			if ns.Role != pgreplica.RoleReplica || ns.Err != nil || ns.Timeline != 1 || ns.SystemID == 0 || !ns.Reads {
				t.Errorf("replica %d: %s", i, describe(ns))
			}
			if ns.Receiver != pgreplica.StatusNeedsMonitor || ns.SyncState != pgreplica.StatusNeedsMonitor {
				t.Errorf("replica %d: receiver %q, sync state %q; want %q for both", i, ns.Receiver, ns.SyncState, pgreplica.StatusNeedsMonitor)
			}
		}
		if ns := status(t, cn, c, 0); ns.Role != pgreplica.RolePrimary || ns.Err != nil || ns.Timeline != 1 {
			t.Errorf("primary: %s", describe(ns))
		}

		// Writes, read-your-writes of a session, eventual reads on both
		// replicas, a read-write transaction: as for any role.
		sess := pgreplica.NewSession()
		sctx := pgreplica.WithSession(ctx, sess)
		if _, err := db.ExecContext(sctx, "INSERT INTO priv_t (seq) VALUES (1)"); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := db.QueryRowContext(sctx, "SELECT count(*) FROM priv_t WHERE seq = 1").Scan(&n); err != nil || n != 1 {
			t.Fatalf("session read after its write: %d rows, %v", n, err)
		}
		awaitCaughtUp(t, ctx, c, cn)
		if seen := spread(t, sctx, db, c, 10); seen[0] != 0 {
			t.Errorf("session reads of a caught-up cluster went to %v, want replicas only", seen)
		}
		if seen := spread(t, pgreplica.WithEventual(ctx), db, c, 40); seen[1] == 0 || seen[2] == 0 {
			t.Errorf("eventual reads went to %v, want both replicas", seen)
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO priv_t (seq) VALUES (2)"); err != nil {
			t.Fatal(err)
		}
		if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM priv_t").Scan(&n); err != nil || n != 2 {
			t.Fatalf("read in a read-write transaction: %d rows, %v", n, err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		// The process default reads its writes too.
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM priv_t").Scan(&n); err != nil || n != 2 {
			t.Fatalf("read after the transaction: %d rows, %v", n, err)
		}
		if got := logs.matching("cannot see replication state"); len(got) != 1 {
			t.Errorf("%d warnings about hidden replication state, want exactly 1: %v", len(got), got)
		} else if !strings.Contains(got[0], "role=app") {
			t.Errorf("warning does not name the role: %s", got[0])
		}
	})

	t.Run("functions revoked from PUBLIC", func(t *testing.T) {
		revoke := func(fns string) {
			t.Helper()
			if err := c.Exec(ctx, c.Primary(), "REVOKE EXECUTE ON FUNCTION "+fns+" FROM PUBLIC"); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if err := c.Exec(ctx, c.Primary(), "GRANT EXECUTE ON FUNCTION "+fns+" TO PUBLIC"); err != nil {
					t.Error(err)
				}
			})
			if err := c.WaitCaughtUp(ctx); err != nil {
				t.Fatal(err)
			}
		}
		optional := "pg_walfile_name(pg_lsn), pg_is_wal_replay_paused(), pg_last_wal_receive_lsn()"
		revoke(optional)
		logs := &warnings{}
		db, cn := openAs(t, c, "app", logs)
		for i := range 3 {
			if ns := status(t, cn, c, i); ns.Err != nil || ns.Timeline != 1 || ns.Role == pgreplica.RoleUnknown {
				t.Errorf("node %d with %s revoked: %s", i, optional, describe(ns))
			}
		}
		if seen := spread(t, pgreplica.WithEventual(ctx), db, c, 10); seen[0] != 0 {
			t.Errorf("eventual reads went to %v, want replicas", seen)
		}
		if got := logs.matching("may not use functions"); len(got) != 1 || !strings.Contains(got[0], "pg_walfile_name") {
			t.Errorf("warnings about revoked functions: %v; want one naming them", got)
		}

		// Without pg_control_system() the router cannot key sessions and
		// tokens: Ping says so, and the hosts answer, denied.
		if err := c.Exec(ctx, c.Primary(), "REVOKE EXECUTE ON FUNCTION pg_control_system() FROM PUBLIC"); err != nil {
			t.Fatal(err)
		}
		granted := false
		grant := func() {
			if !granted {
				granted = true
				if err := c.Exec(context.Background(), c.Primary(), "GRANT EXECUTE ON FUNCTION pg_control_system() TO PUBLIC"); err != nil {
					t.Error(err)
				}
			}
		}
		t.Cleanup(grant)
		if err := c.WaitCaughtUp(ctx); err != nil {
			t.Fatal(err)
		}
		db2, err := sql.Open(pgreplica.DriverName, dsnAs(c, "app"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db2.Close() })
		err = db2.PingContext(ctx)
		if !errors.Is(err, pgreplica.ErrInsufficientPrivilege) || errors.Is(err, pgreplica.ErrNoReachableHost) ||
			!strings.Contains(err.Error(), "GRANT EXECUTE ON FUNCTION pg_control_system() TO app") {
			t.Fatalf("Ping without pg_control_system(): %v; want ErrInsufficientPrivilege naming the GRANT", err)
		}
		t.Log(err)
		cn2, err := pgreplica.ConnectorOf(ctx, db2)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if ns := status(t, cn2, c, i); ns.Reads || !strings.HasPrefix(ns.Why, "answers, but the role lacks privileges") {
				t.Errorf("node %d without pg_control_system(): %s", i, describe(ns))
			}
		}
		// A GRANT heals it without a restart.
		grant()
		if err := c.WaitCaughtUp(ctx); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := within(ctx, 10*time.Second)
		defer cancel()
		if err := waitFor(wctx, "Ping to succeed after the GRANT", func() (bool, string) {
			err := db2.PingContext(wctx)
			return err == nil, fmt.Sprint(err)
		}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("failover", func(t *testing.T) {
		logs := &warnings{}
		db, cn := openAs(t, c, "app", logs)
		awaitCaughtUp(t, ctx, c, cn)
		if err := c.Stop(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if err := c.Promote(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if err := c.Repoint(ctx, 2, 1); err != nil {
			t.Fatal(err)
		}
		// The new primary's timeline comes from pg_walfile_name; replica
		// 2's only from pg_control_checkpoint() (received_tli is hidden),
		// which still says 1 until its next restartpoint.
		wctx, cancel := within(ctx, 20*time.Second)
		defer cancel()
		if err := waitFor(wctx, "node 1 primary on timeline 2, node 2 streaming from it", func() (bool, string) {
			p, r := status(t, cn, c, 1), status(t, cn, c, 2)
			return p.Role == pgreplica.RolePrimary && p.Timeline == 2 && r.Role == pgreplica.RoleReplica && r.Err == nil &&
				r.Receiver == pgreplica.StatusNeedsMonitor, describe(p) + " " + describe(r)
		}); err != nil {
			t.Fatal(err)
		}
		r := status(t, cn, c, 2)
		t.Logf("replica 2 after the failover: %s", describe(r))
		if r.Timeline == 1 && (r.Reads || !strings.Contains(r.Why, "last restartpoint") || !strings.Contains(r.Why, "pg_monitor")) {
			t.Errorf("replica 2 on timeline 1 as of its restartpoint: %s; want no reads and a Why naming the restartpoint and pg_monitor", describe(r))
		}
		// A restartpoint after the new primary's checkpoint shows the new
		// timeline: replica 2 serves reads again.
		if err := c.Exec(ctx, 1, "CHECKPOINT"); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitCaughtUp(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.Exec(ctx, 2, "CHECKPOINT"); err != nil {
			t.Fatal(err)
		}
		wctx2, cancel2 := within(ctx, 10*time.Second)
		defer cancel2()
		if err := waitFor(wctx2, "replica 2 on timeline 2 taking reads", func() (bool, string) {
			r := status(t, cn, c, 2)
			return r.Timeline == 2 && r.Reads, describe(r)
		}); err != nil {
			t.Fatal(err)
		}
		if seen := spread(t, pgreplica.WithEventual(ctx), db, c, 10); seen[2] != 10 {
			t.Errorf("eventual reads after the restartpoint went to %v, want replica 2", seen)
		}
	})
}

// dsnAs is c's DSN for another role, with extra parameters.
func dsnAs(c *integration.Cluster, user string, params ...string) string {
	dsn := strings.Replace(c.DSN(), "postgres://postgres@", "postgres://"+user+"@", 1)
	for _, p := range params {
		dsn += "&" + p
	}
	return dsn
}

// openAs is open for another role, logging to logs when not nil.
func openAs(t *testing.T, c *integration.Cluster, user string, logs *warnings) (*sql.DB, *pgreplica.Connector) {
	t.Helper()
	c.Need(t)
	cfg, err := itest.ParseDSN(dsnAs(c, user, "application_name="+appName(t)))
	if err != nil {
		t.Fatal(err)
	}
	if logs != nil {
		cfg.Logger = slog.New(logs)
	}
	return itest.OpenConfig(t, cfg)
}

// warnings is a slog.Handler that keeps Warn records as text.
type warnings struct {
	mu   sync.Mutex
	recs []string
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler           { return w }
func (w *warnings) WithGroup(string) slog.Handler                { return w }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	s := r.Message
	r.Attrs(func(a slog.Attr) bool {
		s += " " + a.String()
		return true
	})
	w.mu.Lock()
	w.recs = append(w.recs, s)
	w.mu.Unlock()
	return nil
}

// matching returns the records that contain sub.
func (w *warnings) matching(sub string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, s := range w.recs {
		if strings.Contains(s, sub) {
			out = append(out, s)
		}
	}
	return out
}
