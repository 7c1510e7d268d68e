package drivertest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration/itest"
)

// The database/sql door with pgx's hooks (pgreplica.Config.Pgx): the
// same hooks as the pgx handle's (integration/pgxtest's hooks_test.go),
// through sql.OpenDB.

// openHooked returns a *sql.DB on the cluster from a Config that
// configure gave hooks, pinged, and its connector; closed with t.
func openHooked(t *testing.T, configure func(*pgreplica.Config), params ...string) (*sql.DB, *pgreplica.Connector) {
	t.Helper()
	cluster.Need(t)
	dsn := cluster.DSN() + "&application_name=" + appName(t) + "&pgreplica_wait_budget=300ms"
	for _, p := range params {
		dsn += "&" + p
	}
	cfg, err := itest.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	configure(&cfg)
	return itest.OpenConfig(t, cfg)
}

// servedByEvery runs read, on the primary one time in three and on any
// replica otherwise, until every node served it twice.
func servedByEvery(t *testing.T, what string, read func(ctx context.Context) (port int, err error)) {
	t.Helper()
	ctx := ctxFor(t)
	served := map[int]int{}
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; len(served) < cluster.Len() || slices.Min(slices.Collect(maps.Values(served))) < 2; i++ {
		rctx, where := pgreplica.WithEventual(ctx), "eventual"
		if i%3 == 0 {
			rctx, where = pgreplica.WithPrimary(ctx), "primary"
		}
		port, err := read(rctx)
		if err != nil {
			t.Fatalf("%s: read %d (%s): %v", what, i, where, err)
		}
		served[nodeOf(t, port)]++
		if time.Now().After(deadline) {
			t.Fatalf("%s: reads served by %v; want every node of %d", what, served, cluster.Len())
		}
	}
}

// registerMood is an AfterConnect that registers an enum and its array
// and SETs a per-connection setting.
func registerMood(ctx context.Context, c *pgx.Conn) error {
	for _, name := range []string{"pgr_mood", "_pgr_mood"} {
		typ, err := c.LoadType(ctx, name)
		if err != nil {
			return err
		}
		c.TypeMap().RegisterType(typ)
	}
	_, err := c.Exec(ctx, "SET pgrtest.mark = 'hooked'")
	return err
}

// moodRead reads an enum array, the per-connection setting and the port.
const moodRead = "SELECT ARRAY['ok', 'happy']::pgr_mood[], current_setting('pgrtest.mark', true), inet_server_port()"

// readMood runs moodRead through db and returns what its column type says
// of the array (the type's name once pgx knows it, else its OID) and the
// setting.
func readMood(ctx context.Context, db *sql.DB) (typ, mark string, port int, err error) {
	rows, err := db.QueryContext(ctx, moodRead)
	if err != nil {
		return "", "", 0, err
	}
	defer rows.Close()
	cts, err := rows.ColumnTypes()
	if err != nil {
		return "", "", 0, err
	}
	if !rows.Next() {
		return "", "", 0, errors.Join(errors.New("no row"), rows.Err())
	}
	var arr string
	var m sql.NullString
	if err := rows.Scan(&arr, &m, &port); err != nil {
		return "", "", 0, err
	}
	if arr != "{ok,happy}" {
		return "", "", port, fmt.Errorf("array %q", arr)
	}
	return cts[0].DatabaseTypeName(), m.String, port, rows.Close()
}

// TestSQLAfterConnectOnEveryServer: through database/sql, AfterConnect
// registers an enum and its array and SETs a per-connection setting on
// every connection: each read, on the replicas and on the primary, and a
// read that carried its replay check in its own flight, sees the setting
// and the array's type by name (stdlib names a type pgx knows, else gives
// its OID).
func TestSQLAfterConnectOnEveryServer(t *testing.T) {
	cluster.Need(t)
	mustExec(t, cluster.Primary(), "DROP TYPE IF EXISTS pgr_mood CASCADE; CREATE TYPE pgr_mood AS ENUM ('sad', 'ok', 'happy')")
	if err := cluster.WaitCaughtUp(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	hooked := func(cfg *pgreplica.Config) { cfg.Pgx = &pgreplica.PgxHooks{AfterConnect: registerMood} }
	check := func(what, typ, mark string) error {
		if typ != "_PGR_MOOD" || mark != "hooked" {
			return fmt.Errorf("%s: array type %q, mark %q; want _PGR_MOOD and the mark AfterConnect set", what, typ, mark)
		}
		return nil
	}
	db, _ := openHooked(t, hooked)
	servedByEvery(t, "a read", func(ctx context.Context) (int, error) {
		typ, mark, port, err := readMood(ctx, db)
		if err == nil {
			err = check(fmt.Sprintf("node %d", nodeOf(t, port)), typ, mark)
		}
		return port, err
	})
	// Its probers, shared with the next handle's nodes (one per address
	// for the process), would probe for it every 250 ms and could show the
	// replica caught up before the read flies.
	db.Close()

	db, cn := openHooked(t, hooked, "tuning_monitor_interval=1h", "tuning_hedge_delay=-1s")
	itest.AwaitRTT(t, cn)
	ctx := ctxFor(t)
	sess := pgreplica.NewSession()
	sctx := pgreplica.WithSession(ctx, sess)
	tbl := table(t, db)
	if _, err := db.ExecContext(sctx, "INSERT INTO "+tbl+" (v) VALUES ('x')"); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	sess.LSN()
	before := cn.Stats().FlightChecks
	typ, mark, port, err := readMood(sctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if err := check("the read in flight", typ, mark); err != nil {
		t.Error(err)
	}
	if cn.Stats().FlightChecks != before+1 || nodeOf(t, port) == cluster.Primary() {
		t.Errorf("the session's read ran on node %d, flight checks %d → %d; want one on a replica", nodeOf(t, port), before, cn.Stats().FlightChecks)
	}
}

// TestSQLTracerSeesEveryStatement: through database/sql, a ConnConfig's
// tracer sees each statement the application sent, once, on the
// replicas and on the primary (Exec, Query, a transaction's statements,
// a read-only transaction's, a read that carried its replay check in its
// own flight), and none of pgreplica's own, the monitor's included.
func TestSQLTracerSeesEveryStatement(t *testing.T) {
	tr := &itest.Tracer{}
	db, cn := openHooked(t, func(cfg *pgreplica.Config) {
		cc, err := pgx.ParseConfig("user=postgres dbname=postgres sslmode=disable application_name=" + appName(t))
		if err != nil {
			t.Fatal(err)
		}
		cc.Tracer = tr
		cfg.User, cfg.Database, cfg.Params = "", "", nil // ConnConfig holds them
		cfg.Pgx = &pgreplica.PgxHooks{ConnConfig: cc}
	}, "tuning_monitor_interval=1h", "tuning_hedge_delay=-1s")
	itest.AwaitRTT(t, cn)
	ctx := ctxFor(t)
	tbl := table(t, db)
	ports := map[string]int{}
	read := func(ctx context.Context, tag string) {
		t.Helper()
		var port int
		if err := db.QueryRowContext(ctx, "SELECT inet_server_port() /* "+tag+" */").Scan(&port); err != nil {
			t.Fatalf("%s: %v", tag, err)
		}
		ports[tag] = port
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO "+tbl+" (v) VALUES ('exec')"); err != nil {
		t.Fatal(err)
	}
	read(pgreplica.WithEventual(ctx), "replica-read")
	read(pgreplica.WithPrimary(ctx), "primary-read")
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "UPDATE "+tbl+" SET v = 'tx' /* in-tx */"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	rtx, err := db.BeginTx(pgreplica.WithEventual(ctx), &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var port int
	if err := rtx.QueryRowContext(ctx, "SELECT inet_server_port() /* in-read-only-tx */").Scan(&port); err != nil {
		t.Fatal(err)
	}
	if err := rtx.Commit(); err != nil {
		t.Fatal(err)
	}
	ports["in-read-only-tx"] = port

	sess := pgreplica.NewSession()
	sctx := pgreplica.WithSession(ctx, sess)
	if _, err := db.ExecContext(sctx, "INSERT INTO "+tbl+" (v) VALUES ('session')"); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	sess.LSN()
	before := cn.Stats().FlightChecks
	read(sctx, "in-flight")
	if cn.Stats().FlightChecks != before+1 {
		t.Errorf("the session's read carried no check in its flight")
	}

	for tag, port := range ports {
		if onPrimary := nodeOf(t, port) == cluster.Primary(); onPrimary != (tag == "primary-read") {
			t.Errorf("%s ran on node %d", tag, nodeOf(t, port))
		}
	}
	for _, want := range []string{"VALUES ('exec')", "replica-read", "primary-read", "in-tx", "in-read-only-tx", "VALUES ('session')", "in-flight"} {
		if n := tr.Count(want); n != 1 {
			t.Errorf("%q traced %d times, want once: %q", want, n, tr.All())
		}
	}
	if n := tr.Count("begin"); n < 2 {
		t.Errorf("%d BEGINs traced, want both transactions'", n)
	}
	itest.CheckNoneOwn(t, tr)
}

// TestSQLBeforeConnectRotatesPassword: through database/sql,
// BeforeConnect gives each new connection the password of the moment; the
// password changes under the running pool (ALTER ROLE, replicated) and
// every session of the role ends: the new connections, and the monitor's,
// log in with the new one.
func TestSQLBeforeConnectRotatesPassword(t *testing.T) {
	cluster.Need(t)
	const role = "pgr_sql_rotating"
	itest.PasswordRole(t, cluster, role, "first-horse")
	var password atomic.Value
	password.Store("first-horse")
	db, cn := openHooked(t, func(cfg *pgreplica.Config) {
		cfg.User = role
		cfg.Pgx = &pgreplica.PgxHooks{BeforeConnect: func(_ context.Context, cc *pgx.ConnConfig) error {
			cc.Password = password.Load().(string)
			return nil
		}}
	}, "tuning_monitor_interval=50ms")
	readEverywhere := func(when string) {
		t.Helper()
		servedByEvery(t, when, func(ctx context.Context) (int, error) {
			var port int
			var user string
			err := db.QueryRowContext(ctx, "SELECT inet_server_port(), current_user").Scan(&port, &user)
			if err == nil && user != role {
				err = fmt.Errorf("logged in as %s", user)
			}
			return port, err
		})
	}
	readEverywhere("before the rotation")
	mustExec(t, cluster.Primary(), "SET password_encryption = 'scram-sha-256'; ALTER ROLE "+role+" PASSWORD 'second-staple'")
	if err := cluster.WaitCaughtUp(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	password.Store("second-staple")
	itest.TerminateRole(t, cluster, role)
	readEverywhere("after the rotation")
	if _, err := db.ExecContext(ctxFor(t), "SELECT 1"); err != nil {
		t.Fatalf("a statement on the primary after the rotation: %v", err)
	}
	itest.TerminateRole(t, cluster, role) // now the monitor must log in itself
	itest.AwaitHealthySince(t, cn, time.Now())
}

// TestSQLPoolHooks: through database/sql, PrepareConn runs before each
// borrow of a statement and AfterRelease after each give-back (the
// monitor's borrows run neither), an error of PrepareConn fails the
// statement, AfterRelease false closes the connection, and BeforeClose
// runs before each close, db.Close's included.
func TestSQLPoolHooks(t *testing.T) {
	var (
		mu                                    sync.Mutex
		connected, prepared, released, closed []uint32
		prepareErr                            error
		keep                                  = true
	)
	add := func(l *[]uint32, c *pgx.Conn) {
		mu.Lock()
		defer mu.Unlock()
		*l = append(*l, c.PgConn().PID())
	}
	counts := func() (c, p, r, cl int) {
		mu.Lock()
		defer mu.Unlock()
		return len(connected), len(prepared), len(released), len(closed)
	}
	wasClosed := func(pid uint32) bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(closed, pid)
	}
	db, cn := openHooked(t, func(cfg *pgreplica.Config) {
		cfg.Pgx = &pgreplica.PgxHooks{
			AfterConnect: func(_ context.Context, c *pgx.Conn) error { add(&connected, c); return nil },
			PrepareConn: func(_ context.Context, c *pgx.Conn) (bool, error) {
				add(&prepared, c)
				mu.Lock()
				defer mu.Unlock()
				return true, prepareErr
			},
			AfterRelease: func(c *pgx.Conn) bool {
				add(&released, c)
				mu.Lock()
				defer mu.Unlock()
				return keep
			},
			BeforeClose: func(c *pgx.Conn) { add(&closed, c) },
		}
	}, "tuning_hedge_delay=-1s", "tuning_monitor_interval=20ms", "tuning_health_check_after=-1s")
	ctx := ctxFor(t)
	await := func(what string, cond func() bool) {
		t.Helper()
		if err := itest.WaitFor(ctx, what, func() (bool, string) { return cond(), "" }); err != nil {
			t.Fatal(err)
		}
	}
	await("AfterRelease of Ping's borrow", func() bool { _, p, r, _ := counts(); return p > 0 && r == p })
	_, p0, r0, _ := counts()
	const n = 10
	for i := range n {
		rctx := pgreplica.WithEventual(ctx)
		if i%2 == 0 {
			rctx = pgreplica.WithPrimary(ctx)
		}
		var v int
		if err := db.QueryRowContext(rctx, "SELECT 1").Scan(&v); err != nil {
			t.Fatal(err)
		}
	}
	await("AfterRelease of every read", func() bool { _, _, r, _ := counts(); return r-r0 == n })
	itest.AwaitProbes(t, cn, 10) // on the idle connections: no hook
	if _, p, r, _ := counts(); p-p0 != n || r-r0 != n {
		t.Errorf("%d reads called PrepareConn %d times and AfterRelease %d times", n, p-p0, r-r0)
	}

	errNo := errors.New("not now")
	mu.Lock()
	prepareErr = errNo
	mu.Unlock()
	if _, err := db.ExecContext(ctx, "SELECT 1"); !errors.Is(err, errNo) {
		t.Errorf("PrepareConn (true, err): Exec returned %v", err)
	}
	mu.Lock()
	prepareErr, keep = nil, false
	mu.Unlock()
	var pid uint32
	if err := db.QueryRowContext(pgreplica.WithPrimary(ctx), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	await(fmt.Sprintf("backend %d closed after AfterRelease false", pid), func() bool { return wasClosed(pid) })
	mu.Lock()
	keep = true
	mu.Unlock()

	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if c, _, _, cl := counts(); c != cl {
		t.Errorf("after Close: %d connections made, %d closed with BeforeClose", c, cl)
	}
}
