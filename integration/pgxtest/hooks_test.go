package pgxtest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration/itest"
	"github.com/pgreplica/pgreplica/pgreplicapgx"
)

// openConfig returns a handle made as a pgxpool program makes its pool:
// ParseConfig of the cluster's DSN (with params, tuning_* ones too: see
// itest.ParsePgx), configure, then NewWithConfig; pinged, closed with t.
func openConfig(t *testing.T, configure func(*pgreplicapgx.Config), params ...string) *pgreplicapgx.Pool {
	t.Helper()
	cluster.Need(t)
	dsn := cluster.DSN() + "&application_name=" + appName(t) + "&pgreplica_wait_budget=300ms"
	for _, p := range params {
		dsn += "&" + p
	}
	cfg, err := itest.ParsePgx(dsn)
	if err != nil {
		t.Fatal(err)
	}
	configure(cfg)
	ctx := ctxFor(t)
	pool, err := pgreplicapgx.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := pool.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	return pool
}

// setUp runs statements on the primary and waits until the replicas
// replayed them.
func setUp(t *testing.T, stmts ...string) {
	t.Helper()
	cluster.Need(t)
	ctx := ctxFor(t)
	for _, s := range stmts {
		if err := cluster.Exec(ctx, cluster.Primary(), s); err != nil {
			t.Fatal(err)
		}
	}
	if err := cluster.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
}

// registerMood is an AfterConnect that registers the enum pgr_mood and
// its array, as a program using enums does, and sets a per-connection
// setting.
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

const moodSchema = "DROP TYPE IF EXISTS pgr_mood CASCADE; CREATE TYPE pgr_mood AS ENUM ('sad', 'ok', 'happy')"

// moodRead reads an enum array (given as an argument), the
// per-connection setting and the server's port.
const moodRead = "SELECT $1::pgr_mood[], current_setting('pgrtest.mark', true), inet_server_port()"

// moodArg is moodRead's argument.
var moodArg = []string{"ok", "happy"}

// TestAfterConnectOnEveryServer: AfterConnect registers an enum type and
// its array (LoadType, RegisterType) and SETs a per-connection setting;
// every read, on each replica and on the primary, through Query,
// QueryRow, a batch and a read-only transaction, scans the enum array and
// sees the setting. Without the registration pgx hands out the array's
// text.
func TestAfterConnectOnEveryServer(t *testing.T) {
	setUp(t, moodSchema)
	pool := openConfig(t, func(cfg *pgreplicapgx.Config) { cfg.AfterConnect = registerMood })
	type read func(ctx context.Context) (moods []string, mark string, port int32, err error)
	scan := func(row pgx.Row) ([]string, string, int32, error) {
		// Scanned into any, as pgx.RowToMap and rows.Values do: pgx
		// decodes the array only when it knows its type, else it hands
		// out its text, "{ok,happy}".
		var v any
		var mark string
		var port int32
		if err := row.Scan(&v, &mark, &port); err != nil {
			return nil, "", 0, err
		}
		var moods []string
		elems, ok := v.([]any)
		if !ok {
			return nil, mark, port, fmt.Errorf("pgr_mood[] scanned as %T %v", v, v)
		}
		for _, e := range elems {
			s, _ := e.(string)
			moods = append(moods, s)
		}
		return moods, mark, port, nil
	}
	reads := map[string]read{
		"QueryRow": func(ctx context.Context) ([]string, string, int32, error) {
			return scan(pool.QueryRow(ctx, moodRead, moodArg))
		},
		"Query": func(ctx context.Context) ([]string, string, int32, error) {
			rows, err := pool.Query(ctx, moodRead, moodArg)
			if err != nil {
				return nil, "", 0, err
			}
			defer rows.Close()
			if !rows.Next() {
				return nil, "", 0, errors.Join(errors.New("no row"), rows.Err())
			}
			return scan(rows)
		},
		"batch": func(ctx context.Context) (moods []string, mark string, port int32, err error) {
			b := &pgx.Batch{}
			b.Queue(moodRead, moodArg).QueryRow(func(row pgx.Row) error {
				moods, mark, port, err = scan(row)
				return err
			})
			return moods, mark, port, errors.Join(err, pool.SendBatch(ctx, b).Close())
		},
		"read-only transaction": func(ctx context.Context) ([]string, string, int32, error) {
			tx, err := pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
			if err != nil {
				return nil, "", 0, err
			}
			defer tx.Rollback(ctx)
			return scan(tx.QueryRow(ctx, moodRead, moodArg))
		},
	}
	for _, name := range slices.Sorted(maps.Keys(reads)) {
		everyNode(t, name, func(ctx context.Context) (int32, error) {
			got, mark, port, err := reads[name](ctx)
			if err == nil && (!slices.Equal(got, moodArg) || mark != "hooked") {
				err = fmt.Errorf("node %d: %q, mark %q; want %q and the mark AfterConnect set", nodeOf(t, port), got, mark, moodArg)
			}
			return port, err
		})
	}
}

// everyNode runs read, on the primary one time in three and on any
// replica otherwise, until every node served it twice (the monitor may
// take a moment to admit a replica), failing t on an error.
func everyNode(t *testing.T, what string, read func(ctx context.Context) (port int32, err error)) {
	t.Helper()
	ctx := ctxFor(t)
	served := map[int]int{}
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; len(served) < cluster.Len() || slices.Min(slices.Collect(maps.Values(served))) < 2; i++ {
		rctx := pgreplica.WithEventual(ctx)
		if i%3 == 0 {
			rctx = pgreplica.WithPrimary(ctx)
		}
		port, err := read(rctx)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		served[nodeOf(t, port)]++
		if time.Now().After(deadline) {
			t.Fatalf("%s: reads served by %v; want every node of %d", what, served, cluster.Len())
		}
	}
}

// TestTracerSeesEveryStatement: the tracer of ConnConfig sees each
// statement the application sent, once, on the replicas and on the
// primary: Exec, Query, QueryRow, a batch, CopyFrom and a transaction's
// statements; a read that carried its replay check in its own flight (a
// query, a batch, a read-only transaction, the router's view an hour old)
// as the call alone; and none of pgreplica's own statements.
func TestTracerSeesEveryStatement(t *testing.T) {
	setUp(t, "DROP TABLE IF EXISTS pgr_traced; CREATE TABLE pgr_traced (id int, v text)")
	tr := &itest.Tracer{}
	pool := openConfig(t, func(cfg *pgreplicapgx.Config) { cfg.ConnConfig.Tracer = tr },
		"tuning_monitor_interval=1h", "tuning_hedge_delay=-1s")
	// The first probes go at once, then none for an hour: the replicas'
	// known positions stay older than the session's write below.
	itest.AwaitRTT(t, pool.Connector())
	ctx := ctxFor(t)
	sess := pgreplica.NewSession()
	sctx := pgreplica.WithSession(ctx, sess)
	ports := map[string]int32{}
	read := func(ctx context.Context, tag string) {
		t.Helper()
		var port int32
		if err := pool.QueryRow(ctx, "SELECT inet_server_port() /* "+tag+" */").Scan(&port); err != nil {
			t.Fatalf("%s: %v", tag, err)
		}
		ports[tag] = port
	}
	if _, err := pool.Exec(ctx, "INSERT INTO pgr_traced VALUES (1, 'exec')"); err != nil {
		t.Fatal(err)
	}
	read(pgreplica.WithEventual(ctx), "replica-queryrow")
	read(pgreplica.WithPrimary(ctx), "primary-queryrow")
	rows, err := pool.Query(pgreplica.WithEventual(ctx), "SELECT id FROM pgr_traced /* replica-rows */")
	if err != nil {
		t.Fatal(err)
	}
	rows.Close()
	if _, err := pool.CopyFrom(ctx, pgx.Identifier{"pgr_traced"}, []string{"id", "v"}, pgx.CopyFromRows([][]any{{2, "copy"}})); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "UPDATE pgr_traced SET v = 'tx' /* in-tx */"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	// Reads after a session's write, the router's view an hour old: each
	// carries its replay check in its own flight, to a replica that has
	// the write.
	if _, err := pool.Exec(sctx, "INSERT INTO pgr_traced VALUES (3, 'session')"); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	sess.LSN()
	read(sctx, "guarded-query")
	b := &pgx.Batch{}
	b.Queue("SELECT 1 /* guarded-batch-1 */")
	b.Queue("SELECT 2 /* guarded-batch-2 */")
	if err := pool.SendBatch(sctx, b).Close(); err != nil {
		t.Fatal(err)
	}
	rtx, err := pool.BeginTx(sctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	var port int32
	if err := rtx.QueryRow(sctx, "SELECT inet_server_port() /* guarded-tx */").Scan(&port); err != nil {
		t.Fatal(err)
	}
	if err := rtx.Commit(sctx); err != nil {
		t.Fatal(err)
	}
	ports["guarded-tx"] = port
	if s := pool.Stat(); s.FlightChecks == 0 {
		t.Errorf("no read carried its check in its flight: %+v", s)
	}

	for tag, port := range ports {
		onPrimary := nodeOf(t, port) == cluster.Primary()
		if onPrimary != strings.HasPrefix(tag, "primary") {
			t.Errorf("%s ran on node %d", tag, nodeOf(t, port))
		}
	}
	for _, want := range []string{"INSERT INTO pgr_traced VALUES (1, 'exec')", "replica-queryrow", "primary-queryrow",
		"replica-rows", "in-tx", "INSERT INTO pgr_traced VALUES (3, 'session')", "guarded-query", "guarded-batch-1",
		"guarded-batch-2", "guarded-tx"} {
		if n := tr.Count(want); n != 1 {
			t.Errorf("%q traced %d times, want once: %q", want, n, tr.All())
		}
	}
	if n := tr.Count("begin"); n < 2 {
		t.Errorf("%d BEGINs traced, want the transaction's and the read-only one's", n)
	}
	if c := tr.Copies(); !slices.Equal(c, []string{`"pgr_traced"`}) {
		t.Errorf("copies traced: %q", c)
	}
	itest.CheckNoneOwn(t, tr)
	for _, b := range tr.Batches() {
		if len(b) != 2 || !strings.Contains(b[0], "guarded-batch-1") {
			t.Errorf("batch traced as %q, want the application's two statements", b)
		}
	}
}

// TestTracerSkipsMonitor: with probes every 20 ms, which run on the
// pools' idle connections once the handle has them, the tracer sees the
// application's statements and none of the monitor's, nor its
// connections.
func TestTracerSkipsMonitor(t *testing.T) {
	tr := &itest.Tracer{}
	pool := openConfig(t, func(cfg *pgreplicapgx.Config) { cfg.ConnConfig.Tracer = tr }, "tuning_monitor_interval=20ms")
	ctx := ctxFor(t)
	for i := range 20 { // idle connections on every server
		rctx := pgreplica.WithEventual(ctx)
		if i%2 == 0 {
			rctx = pgreplica.WithPrimary(ctx)
		}
		if _, err := pool.Exec(rctx, "SELECT 1 /* app */"); err != nil {
			t.Fatal(err)
		}
		var v int
		if err := pool.QueryRow(rctx, "SELECT 2 /* app */").Scan(&v); err != nil {
			t.Fatal(err)
		}
	}
	before := tr.Connects()
	itest.AwaitProbes(t, pool.Connector(), 20)
	itest.CheckNoneOwn(t, tr)
	if n := tr.Count("/* app */"); n != 40 {
		t.Errorf("%d application statements traced, want 40", n)
	}
	if n := tr.Connects(); n != before || n == 0 {
		t.Errorf("connections traced: %d before the probes, %d after (the pool's only)", before, n)
	}
}

// TestBeforeConnectRotatesPassword: BeforeConnect gives each new
// connection the password of the moment. The role's password changes
// while the pool runs (ALTER ROLE on the primary, replicated) and every
// session of the role is ended: the pool's new connections log in with
// the new one, so reads on the replicas and on the primary, and writes,
// go on. Ended again, with no statement to make new pooled connections,
// the monitor's probes find the pooled ones dead and log in on their own
// connections, with the new password: every host is seen healthy.
func TestBeforeConnectRotatesPassword(t *testing.T) {
	const role = "pgr_rotating"
	itest.PasswordRole(t, cluster, role, "first-horse")
	var password atomic.Value
	password.Store("first-horse")
	var calls atomic.Int64
	pool := openConfig(t, func(cfg *pgreplicapgx.Config) {
		cfg.ConnConfig.User = role
		cfg.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
			calls.Add(1)
			cc.Password = password.Load().(string)
			return nil
		}
	}, "tuning_monitor_interval=50ms")
	ctx := ctxFor(t)
	readEverywhere := func(when string) {
		t.Helper()
		everyNode(t, when, func(ctx context.Context) (int32, error) {
			var port int32
			var user string
			err := pool.QueryRow(ctx, "SELECT inet_server_port(), current_user").Scan(&port, &user)
			if err == nil && user != role {
				err = fmt.Errorf("logged in as %s", user)
			}
			return port, err
		})
	}
	readEverywhere("before the rotation")

	if err := cluster.Exec(ctx, cluster.Primary(), "SET password_encryption = 'scram-sha-256'; ALTER ROLE "+role+" PASSWORD 'second-staple'"); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	password.Store("second-staple")
	before := calls.Load()
	itest.TerminateRole(t, cluster, role)
	readEverywhere("after the rotation")
	if _, err := pool.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatalf("a statement on the primary after the rotation: %v", err)
	}
	if calls.Load() == before {
		t.Error("no new connection called BeforeConnect")
	}
	itest.TerminateRole(t, cluster, role)
	itest.AwaitHealthySince(t, pool.Connector(), time.Now())
}

// hookLog records the pool hooks' calls, by backend PID.
type hookLog struct {
	mu                          sync.Mutex
	connected, prepared, closed []uint32
	released                    []uint32
	// prepare decides PrepareConn's answer for a backend.
	prepare func(pid uint32) (bool, error)
	// release decides AfterRelease's.
	release func(pid uint32) bool
}

func (h *hookLog) install(cfg *pgreplicapgx.Config) {
	add := func(l *[]uint32, c *pgx.Conn) {
		h.mu.Lock()
		defer h.mu.Unlock()
		*l = append(*l, c.PgConn().PID())
	}
	cfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error { add(&h.connected, c); return nil }
	cfg.PrepareConn = func(_ context.Context, c *pgx.Conn) (bool, error) {
		add(&h.prepared, c)
		h.mu.Lock()
		f := h.prepare
		h.mu.Unlock()
		if f == nil {
			return true, nil
		}
		return f(c.PgConn().PID())
	}
	cfg.AfterRelease = func(c *pgx.Conn) bool {
		add(&h.released, c)
		h.mu.Lock()
		f := h.release
		h.mu.Unlock()
		return f == nil || f(c.PgConn().PID())
	}
	cfg.BeforeClose = func(c *pgx.Conn) { add(&h.closed, c) }
}

func (h *hookLog) set(prepare func(uint32) (bool, error), release func(uint32) bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.prepare, h.release = prepare, release
}

func (h *hookLog) counts() (connected, prepared, released, closed int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.connected), len(h.prepared), len(h.released), len(h.closed)
}

func (h *hookLog) wasClosed(pid uint32) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Contains(h.closed, pid)
}

// await waits for cond (the hooks run AfterRelease on a goroutine of
// their own).
func await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestPoolHooksAsPgxpool: PrepareConn runs before each borrow of a
// statement, AfterRelease after each give-back, BeforeClose before each
// close, as pgxpool calls them, and their answers do what pgxpool's do:
// PrepareConn false destroys the connection (the statement runs on
// another), false with an error destroys it and fails the statement, true
// with an error keeps it and fails the statement; AfterRelease false
// destroys it. The monitor's borrows of idle connections for its probes
// call none of them. Close calls BeforeClose on every connection.
func TestPoolHooksAsPgxpool(t *testing.T) {
	h := &hookLog{}
	pool := openConfig(t, h.install, "tuning_hedge_delay=-1s", "tuning_monitor_interval=20ms", "tuning_health_check_after=-1s")
	ctx := ctxFor(t)
	pid := func(ctx context.Context) (uint32, error) {
		var p uint32
		err := pool.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&p)
		return p, err
	}
	// Ping's borrow gives its connection back through AfterRelease, on a
	// goroutine of its own: count from when it did.
	await(t, "AfterRelease of Ping's borrow", func() bool { _, p, r, _ := h.counts(); return p > 0 && r == p })
	_, p0, r0, _ := h.counts()
	const n = 10
	for i := range n {
		rctx := pgreplica.WithEventual(ctx)
		if i%2 == 0 {
			rctx = pgreplica.WithPrimary(ctx)
		}
		if _, err := pid(rctx); err != nil {
			t.Fatal(err)
		}
	}
	await(t, "AfterRelease of every read", func() bool { _, _, r, _ := h.counts(); return r-r0 == n })
	itest.AwaitProbes(t, pool.Connector(), 10) // on the idle connections: no hook
	if _, p, r, _ := h.counts(); p-p0 != n || r-r0 != n {
		t.Errorf("%d reads called PrepareConn %d times and AfterRelease %d times", n, p-p0, r-r0)
	}

	primary := pgreplica.WithPrimary(ctx)
	// PrepareConn false, no error: each connection open so far is closed
	// when offered, and the statement runs on a new one.
	h.mu.Lock()
	old := slices.Clone(h.connected)
	h.mu.Unlock()
	var refused []uint32
	h.set(func(p uint32) (bool, error) {
		if slices.Contains(old, p) {
			refused = append(refused, p)
			return false, nil
		}
		return true, nil
	}, nil)
	fresh, err := pid(primary)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(old, fresh) || len(refused) == 0 {
		t.Errorf("PrepareConn refused %v: the read ran on backend %d", refused, fresh)
	}
	for _, p := range refused { // puddle destroys on a goroutine
		await(t, fmt.Sprintf("BeforeClose of backend %d, which PrepareConn refused", p), func() bool { return h.wasClosed(p) })
	}

	// true and an error: the statement fails with it, the connection
	// stays; false and an error: it fails, the connection is closed.
	errNo := errors.New("not now")
	for _, keep := range []bool{true, false} {
		var offered []uint32
		h.set(func(p uint32) (bool, error) { offered = append(offered, p); return keep, errNo }, nil)
		if _, err := pool.Exec(ctx, "SELECT 1"); !errors.Is(err, errNo) {
			t.Errorf("PrepareConn (%v, err): Exec returned %v", keep, err)
		}
		if len(offered) != 1 {
			t.Fatalf("PrepareConn (%v, err) was offered %v", keep, offered)
		}
		if keep {
			h.set(nil, nil)
			if _, err := pid(primary); err != nil || h.wasClosed(offered[0]) {
				t.Errorf("PrepareConn (true, err): backend %d closed %v; the next read: %v", offered[0], h.wasClosed(offered[0]), err)
			}
		} else {
			await(t, "BeforeClose after PrepareConn (false, err)", func() bool { return h.wasClosed(offered[0]) })
		}
	}

	// AfterRelease false: the connection is closed once given back.
	h.set(nil, func(uint32) bool { return false })
	third, err := pid(primary)
	if err != nil {
		t.Fatal(err)
	}
	await(t, fmt.Sprintf("backend %d closed after AfterRelease false", third), func() bool { return h.wasClosed(third) })
	h.set(nil, nil)

	connected, _, _, closed := h.counts()
	pool.Close()
	if c, _, _, cl := h.counts(); cl != c || c != connected {
		t.Errorf("after Close: %d connections made, %d closed with BeforeClose (%d before Close)", c, cl, closed)
	}
}
