package pgreplica

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"github.com/pgreplica/pgreplica/internal/tuning"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/DATA-DOG/go-sqlmock"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgreplica/pgreplica/internal/probe"
	"github.com/pgreplica/pgreplica/internal/prober"
	"github.com/pgreplica/pgreplica/internal/sqlstate"
	"github.com/pgreplica/pgreplica/internal/stmtclass"
)

// mockCluster is a pgreplica connector whose inner driver is go-sqlmock:
// node 0 is the primary, the others replicas. Roles come from a fixed
// probe, so every expectation below is a routing decision.
type mockCluster struct {
	t     *testing.T
	db    *sql.DB
	c     *Connector
	mocks []sqlmock.Sqlmock
	mu    sync.Mutex // guards roles and lsns, read by the monitor
	roles []role
	lsns  []LSN
	// sysid is this cluster's own system identifier: the process
	// watermark is per cluster and process-wide, so tests must not share one.
	sysid uint64
}

// standInAnswer is what a stand-in probe (Connector.probe) answers: a
// healthy node of role r at lsn, on timeline 1 of cluster sysid.
func standInAnswer(r role, lsn LSN, sysid uint64) *prober.Status {
	st := &prober.Status{LSN: uint64(lsn), Timeline: 1, Sysid: sysid, At: time.Now()}
	switch r {
	case rolePrimary:
		st.Role = prober.Primary
	case roleReplica:
		st.Role = prober.Replica
	}
	return st
}

// mockSysIDs hands each mock cluster a system identifier of its own.
var mockSysIDs atomic.Uint64

func (mc *mockCluster) set(i int, r role, lsn LSN) {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	mc.roles[i], mc.lsns[i] = r, lsn
}

type mockConnector struct {
	drv driver.Driver
	dsn string
}

func (m mockConnector) Connect(context.Context) (driver.Conn, error) { return m.drv.Open(m.dsn) }
func (m mockConnector) Driver() driver.Driver                        { return m.drv }

func newMockCluster(t *testing.T, replicas int, tweak func(*Config)) *mockCluster {
	t.Helper()
	mc := &mockCluster{t: t, sysid: 1000 + mockSysIDs.Add(1)}
	cfg := Config{knobs: tuning.Knobs{MonitorInterval: time.Hour, HealthCheckAfter: -1}, WaitBudget: 20 * time.Millisecond}
	for i := 0; i <= replicas; i++ {
		dsn := fmt.Sprintf("%s-node%d", t.Name(), i)
		db, mock, err := sqlmock.NewWithDSN(dsn, sqlmock.QueryMatcherOption(sqlmock.QueryMatcherEqual))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		mc.mocks = append(mc.mocks, mock)
		cfg.Hosts = append(cfg.Hosts, Host{Addr: dsn, Port: 5432})
		r := roleReplica
		if i == 0 {
			r = rolePrimary
		}
		mc.roles = append(mc.roles, r)
		mc.lsns = append(mc.lsns, 0x100)
	}
	if tweak != nil {
		tweak(&cfg)
	}
	mdrv := func() driver.Driver { db, _, _ := sqlmock.New(); defer db.Close(); return db.Driver() }()
	c, err := newConnector(cfg, func(_ *Config, h Host, _ string) (driver.Connector, error) {
		return mockConnector{drv: mdrv, dsn: h.Addr}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	c.probe = func(_ context.Context, n *node) *prober.Status {
		mc.mu.Lock()
		defer mc.mu.Unlock()
		return standInAnswer(mc.roles[n.idx], mc.lsns[n.idx], mc.sysid)
	}
	for _, n := range c.nodeList() {
		n.pool.identify = nil
	}
	mc.c = c
	mc.db = sql.OpenDB(c)
	t.Cleanup(func() {
		mc.db.Close()
		for i, m := range mc.mocks {
			if err := m.ExpectationsWereMet(); err != nil {
				t.Errorf("node %d: %v", i, err)
			}
		}
	})
	return mc
}

// refresh runs one monitor round with the current roles and LSNs.
func (mc *mockCluster) refresh() {
	if err := mc.db.Ping(); err != nil && !errors.Is(err, ErrNoPrimary) && !errors.Is(err, ErrSplitBrain) {
		mc.t.Fatal(err)
	}
	if err := mc.c.mon.refresh(context.Background()); err != nil {
		mc.t.Fatal(err)
	}
}

// settle waits until every write so far has had its position read (the
// deferred capture, see clusterMarks), so that the mock sees the capture
// statement at this point of the test.
func (mc *mockCluster) settle() {
	mc.t.Helper()
	m := mc.c.marksFor(mc.sysid)
	if err := m.Resolve(context.Background(), mc.c.capturing(), m.Issued()); err != nil {
		mc.t.Fatal(err)
	}
}

// processLSN settles and returns the process watermark.
func (mc *mockCluster) processLSN() LSN {
	mc.settle()
	return LSN(mc.c.marksFor(mc.sysid).All())
}

// expectReplayChecks lets node's replica answer lsn to the replay checks
// of a read that waits for it (up to 20 of them).
func (mc *mockCluster) expectReplayChecks(node int, lsn string) {
	for range 20 {
		mc.mocks[node].ExpectQuery(replaySQL).WillReturnRows(sqlmock.NewRows([]string{"lsn"}).AddRow(lsn))
	}
}

func (mc *mockCluster) expectLSNCapture(node int, lsn string) {
	mc.mocks[node].ExpectQuery(flushLSNSQL).WillReturnRows(sqlmock.NewRows([]string{"lsn"}).AddRow(lsn))
}

func TestRouteExecGoesToPrimaryAndCapturesLSN(t *testing.T) {
	mc := newMockCluster(t, 2, nil)
	mc.mocks[0].ExpectExec("UPDATE t SET x = 1").WillReturnResult(sqlmock.NewResult(0, 1))
	mc.expectLSNCapture(0, "0/200")
	if _, err := mc.db.Exec("UPDATE t SET x = 1"); err != nil {
		t.Fatal(err)
	}
	if got := mc.processLSN(); got != 0x200 {
		t.Fatalf("process watermark %s, want 0/200", got)
	}
}

func TestRouteReadsByStatement(t *testing.T) {
	cases := []struct {
		sql  string
		node int // 0 primary, 1 replica
	}{
		{"SELECT 1", 1},
		{"select * from users where id = 7", 1},
		{"/* pgreplica:primary */ SELECT 1", 0},
		{"SELECT * FROM t FOR UPDATE", 0},
		{"WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d", 0},
		{"SELECT nextval('s')", 0},
		{"VALUES (1)", 1},
		{"SHOW search_path", 1},
		{"SELECT 1; SELECT 2", 0},
	}
	for _, tc := range cases {
		t.Run(tc.sql, func(t *testing.T) {
			mc := newMockCluster(t, 1, func(c *Config) { c.Consistency = ConsistencyEventual })
			mc.mocks[tc.node].ExpectQuery(tc.sql).WillReturnRows(sqlmock.NewRows([]string{"x"}).AddRow(1))
			if tc.node == 0 && stmtclass.Classify(tc.sql).Read == false {
				mc.expectLSNCapture(0, "0/300")
			}
			rows, err := mc.db.Query(tc.sql)
			if err != nil {
				t.Fatal(err)
			}
			rows.Close()
			mc.settle()
		})
	}
}

func TestRouteInsertReturningThroughQuery(t *testing.T) {
	mc := newMockCluster(t, 1, nil)
	q := `INSERT INTO "users" ("name") VALUES ($1) RETURNING "id"`
	mc.mocks[0].ExpectQuery(q).WithArgs("ann").WillReturnRows(sqlmock.NewRows([]string{"id"}).AddRow(1))
	mc.expectLSNCapture(0, "0/400")
	var id int
	if err := mc.db.QueryRow(q, "ann").Scan(&id); err != nil {
		t.Fatal(err)
	}
	if got := mc.processLSN(); got != 0x400 {
		t.Fatalf("process watermark %s, want 0/400", got)
	}
}

func TestRouteReadOnlyErrorRetriesOnPrimaryAndIsRemembered(t *testing.T) {
	mc := newMockCluster(t, 1, func(c *Config) { c.Consistency = ConsistencyEventual })
	q := "SELECT my_writing_function()"
	mc.mocks[1].ExpectQuery(q).WillReturnError(&pgconn.PgError{Code: "25006", Message: "cannot execute INSERT in a read-only transaction"})
	for range 2 {
		mc.mocks[0].ExpectQuery(q).WillReturnRows(sqlmock.NewRows([]string{"x"}).AddRow(1))
		mc.expectLSNCapture(0, "0/500")
	}
	for range 2 { // the second call goes straight to the primary
		var x int
		if err := mc.db.QueryRow(q).Scan(&x); err != nil {
			t.Fatal(err)
		}
		mc.settle()
	}
}

// TestRouteConflictEndsOnThePrimary: a read cancelled by a replay
// conflict on one replica is retried on the other, which replays the same
// WAL and cancels it too; then the primary serves it, as a fallback, and
// the statement goes straight there for a while. With FallbackError the
// conflict is the caller's.
func TestRouteConflictEndsOnThePrimary(t *testing.T) {
	mc := newMockCluster(t, 2, func(c *Config) { c.Consistency = ConsistencyEventual })
	q := "SELECT count(*) FROM cp, pg_sleep(3)"
	conflict := &pgconn.PgError{Code: "40001", Message: "canceling statement due to conflict with recovery"}
	mc.mocks[1].ExpectQuery(q).WillReturnError(conflict)
	mc.mocks[2].ExpectQuery(q).WillReturnError(conflict)
	for range 2 { // the second call goes straight to the primary
		mc.mocks[0].ExpectQuery(q).WillReturnRows(sqlmock.NewRows([]string{"n"}).AddRow(3))
	}
	for range 2 {
		var n int
		if err := mc.db.QueryRow(q).Scan(&n); err != nil || n != 3 {
			t.Fatalf("read = %d, %v; want 3 from the primary", n, err)
		}
	}
	s := mc.c.Stats()
	if s.ConflictRetries != 2 || s.Fallbacks[ReasonConflict] != 2 || s.ConflictsAvoided != 1 || s.FallbackReads != 2 {
		t.Fatalf("conflict retries %d, conflict fallbacks %d, avoided %d, fallback reads %d; want 2, 2, 1, 2",
			s.ConflictRetries, s.Fallbacks[ReasonConflict], s.ConflictsAvoided, s.FallbackReads)
	}

	other := "SELECT count(*) FROM cp2"
	mc.mocks[1].ExpectQuery(other).WillReturnError(conflict)
	mc.mocks[2].ExpectQuery(other).WillReturnError(conflict)
	var n int
	err := mc.db.QueryRowContext(WithFallback(context.Background(), FallbackError), other).Scan(&n)
	if sqlstate.Of(err) != "40001" {
		t.Fatalf("read with FallbackError = %v, want the replicas' conflict", err)
	}
}

// TestRoutePrimaryReadRetriedAfterConnLost: a read on the primary whose
// connection died with the server (a restart, a failover) is sent once
// more on a new connection; a write is not (its outcome is unknown).
func TestRoutePrimaryReadRetriedAfterConnLost(t *testing.T) {
	mc := newMockCluster(t, 1, nil)
	q := "SELECT count(*) FROM t"
	shutdown := &pgconn.PgError{Code: "57P01", Severity: "FATAL", Message: "terminating connection due to administrator command"}
	w := "UPDATE t SET x = 1 RETURNING x"
	// All expectations up front: the pool closes the dead connection in a
	// goroutine of its own, and sqlmock's Close reads the expectation list.
	mc.mocks[0].ExpectQuery(q).WillReturnError(shutdown)
	mc.mocks[0].ExpectQuery(q).WillReturnRows(sqlmock.NewRows([]string{"n"}).AddRow(3))
	mc.mocks[0].ExpectQuery(w).WillReturnError(shutdown)
	var n int
	if err := mc.db.QueryRowContext(WithPrimary(context.Background()), q).Scan(&n); err != nil || n != 3 {
		t.Fatalf("read = %d, %v; want 3 from the retry", n, err)
	}
	if got := mc.c.Stats().ConnLostRetries; got != 1 {
		t.Fatalf("conn-lost retries %d, want 1", got)
	}

	err := mc.db.QueryRow(w).Scan(&n)
	if !errors.Is(err, ErrWriteOutcomeUnknown) {
		t.Fatalf("write = %v, want ErrWriteOutcomeUnknown and no second attempt", err)
	}
}

func TestRouteTransactions(t *testing.T) {
	mc := newMockCluster(t, 1, nil)
	// read-write: primary, LSN captured at commit
	mc.mocks[0].ExpectBegin()
	mc.mocks[0].ExpectExec("INSERT INTO t VALUES (1)").WillReturnResult(sqlmock.NewResult(1, 1))
	mc.mocks[0].ExpectCommit()
	mc.expectLSNCapture(0, "0/600")
	tx, err := mc.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	mc.settle()
	// read-only: a replica (known to have replayed 0/600 after a round)
	mc.set(1, roleReplica, 0x600)
	mc.refresh()
	mc.mocks[1].ExpectBegin()
	mc.mocks[1].ExpectQuery("SELECT 1").WillReturnRows(sqlmock.NewRows([]string{"x"}).AddRow(1))
	mc.mocks[1].ExpectCommit()
	tx, err = mc.db.BeginTx(context.Background(), &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var x int
	if err := tx.QueryRow("SELECT 1").Scan(&x); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	// serializable read-only: the primary (standbys refuse SERIALIZABLE)
	mc.mocks[0].ExpectBegin()
	mc.mocks[0].ExpectRollback()
	tx, err = mc.db.BeginTx(context.Background(), &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelSerializable})
	if err != nil {
		t.Fatal(err)
	}
	tx.Rollback()
}

func TestRouteProcessReadYourWrites(t *testing.T) {
	mc := newMockCluster(t, 1, nil)
	mc.mocks[0].ExpectExec("UPDATE t SET x = 2").WillReturnResult(sqlmock.NewResult(0, 1))
	mc.expectLSNCapture(0, "0/900")
	if _, err := mc.db.Exec("UPDATE t SET x = 2"); err != nil {
		t.Fatal(err)
	}
	mc.settle()
	// The replica is known at 0/100 < 0/900: the read checks it on the
	// connection that would run the query, waits, then falls back.
	mc.mocks[1].MatchExpectationsInOrder(false)
	mc.expectReplayChecks(1, "0/100")
	mc.mocks[0].ExpectQuery("SELECT x FROM t").WillReturnRows(sqlmock.NewRows([]string{"x"}).AddRow(2))
	var x int
	if err := mc.db.QueryRow("SELECT x FROM t").Scan(&x); err != nil {
		t.Fatal(err)
	}
	// Once the replica is known to have replayed the write, the read goes
	// there with no extra round trip.
	mc.set(1, roleReplica, 0x900)
	mc.refresh()
	mc.mocks[1] = freshMock(t, mc, 1)
	mc.mocks[1].ExpectQuery("SELECT x FROM t").WillReturnRows(sqlmock.NewRows([]string{"x"}).AddRow(2))
	if err := mc.db.QueryRow("SELECT x FROM t").Scan(&x); err != nil {
		t.Fatal(err)
	}
}

// freshMock drops the unmet replay-check expectations of a node's mock.
func freshMock(t *testing.T, mc *mockCluster, i int) sqlmock.Sqlmock {
	t.Helper()
	return &lenientMock{Sqlmock: mc.mocks[i]}
}

type lenientMock struct{ sqlmock.Sqlmock }

func (l *lenientMock) ExpectationsWereMet() error { return nil }

func TestRouteNoPrimaryAndSplitBrain(t *testing.T) {
	mc := newMockCluster(t, 1, func(c *Config) { c.Consistency = ConsistencyEventual })
	mc.set(0, roleReplica, 0x100)
	mc.refresh()
	if _, err := mc.db.Exec("INSERT INTO t VALUES (1)"); !errors.Is(err, ErrNoPrimary) {
		t.Fatalf("got %v, want ErrNoPrimary", err)
	}
	mc.mocks[1].MatchExpectationsInOrder(false)
	mc.mocks[0].MatchExpectationsInOrder(false)
	mc.mocks[0].ExpectQuery("SELECT 1").WillReturnRows(sqlmock.NewRows([]string{"x"}).AddRow(1))
	mc.mocks[1].ExpectQuery("SELECT 1").WillReturnRows(sqlmock.NewRows([]string{"x"}).AddRow(1))
	var x int
	if err := mc.db.QueryRow("SELECT 1").Scan(&x); err != nil {
		t.Fatalf("reads must still work without a primary: %v", err)
	}
	mc.mocks[0] = &lenientMock{mc.mocks[0]}
	mc.mocks[1] = &lenientMock{mc.mocks[1]}

	mc.set(0, rolePrimary, 0x100)
	mc.set(1, rolePrimary, 0x100)
	mc.refresh()
	if _, err := mc.db.Exec("INSERT INTO t VALUES (1)"); !errors.Is(err, ErrSplitBrain) {
		t.Fatalf("got %v, want ErrSplitBrain", err)
	}
}

func TestRouteSessionStatePinsConn(t *testing.T) {
	mc := newMockCluster(t, 1, func(c *Config) { c.Consistency = ConsistencyEventual })
	ctx := context.Background()
	cn, err := mc.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mc.mocks[0].ExpectExec("SET search_path = app").WillReturnResult(sqlmock.NewResult(0, 0))
	mc.mocks[0].ExpectQuery("SELECT * FROM things").WillReturnRows(sqlmock.NewRows([]string{"x"}).AddRow(1))
	if _, err := cn.ExecContext(ctx, "SET search_path = app"); err != nil {
		t.Fatal(err)
	}
	var x int
	if err := cn.QueryRowContext(ctx, "SELECT * FROM things").Scan(&x); err != nil {
		t.Fatal(err)
	}
	mc.mocks[0].ExpectClose()
	cn.Close()
	// Another statement reads a replica as usual.
	mc.mocks[1].ExpectQuery("SELECT * FROM things").WillReturnRows(sqlmock.NewRows([]string{"x"}).AddRow(1))
	if err := mc.db.QueryRow("SELECT * FROM things").Scan(&x); err != nil {
		t.Fatal(err)
	}
}

func TestRouteReplicaOnlyFails(t *testing.T) {
	mc := newMockCluster(t, 1, nil)
	mc.mocks[0].ExpectExec("UPDATE t SET x = 3").WillReturnResult(sqlmock.NewResult(0, 1))
	mc.expectLSNCapture(0, "0/A00")
	if _, err := mc.db.Exec("UPDATE t SET x = 3"); err != nil {
		t.Fatal(err)
	}
	mc.settle()
	mc.mocks[1].MatchExpectationsInOrder(false)
	mc.expectReplayChecks(1, "0/100")
	mc.mocks[1] = &lenientMock{mc.mocks[1]}
	ctx := WithFallback(context.Background(), FallbackError)
	var x int
	err := mc.db.QueryRowContext(ctx, "SELECT x FROM t").Scan(&x)
	if !errors.Is(err, ErrNoFreshReplica) {
		t.Fatalf("got %v, want ErrNoFreshReplica", err)
	}
}

// TestRouteSessionReadAdvancesPastTheSnapshot: after a replica read with a
// Session, the session's position rises past the snapshot the read used:
// to a position read after the read (deferred: here the primary's, read
// when the session's token is taken), not only to what was cached before
// it. The read itself costs the replica one statement.
func TestRouteSessionReadAdvancesPastTheSnapshot(t *testing.T) {
	mc := newMockCluster(t, 1, nil)
	sess := NewSession()
	ctx := WithSession(context.Background(), sess)
	mc.mocks[1].ExpectQuery("SELECT v FROM t").WillReturnRows(sqlmock.NewRows([]string{"v"}).AddRow(1))
	// Expected before the read: the background capture a Session's read
	// schedules may run while the test goes on (go-sqlmock's expectations
	// must not be added while a query reads them).
	mc.expectLSNCapture(0, "0/7000")
	var v int
	if err := mc.db.QueryRowContext(ctx, "SELECT v FROM t").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if sess.LSN() != 0x7000 {
		t.Fatalf("session at %s after the read, want 0/7000 (a position read after the read)", sess.LSN())
	}
}

// TestRouteProcessStartsAtThePrimary: a connector's first answer from the
// primary raises the process watermark, so a process that wrote nothing
// yet still reads no older than the database was when it started (the
// previous process may have written a moment ago); an eventual read does
// not care.
func TestRouteProcessStartsAtThePrimary(t *testing.T) {
	mc := newMockCluster(t, 1, nil)
	mc.set(0, rolePrimary, 0x900)
	mc.refresh()
	if got := mc.processLSN(); got != 0x900 {
		t.Fatalf("process watermark at start %s, want the primary's 0/900", got)
	}
	mc.mocks[1].MatchExpectationsInOrder(false)
	mc.expectReplayChecks(1, "0/100")
	mc.mocks[0].ExpectQuery("SELECT x FROM t").WillReturnRows(sqlmock.NewRows([]string{"x"}).AddRow(2))
	var x int
	if err := mc.db.QueryRow("SELECT x FROM t").Scan(&x); err != nil {
		t.Fatal(err)
	}
	mc.mocks[1] = freshMock(t, mc, 1)
	mc.mocks[1].ExpectQuery("SELECT x FROM t").WillReturnRows(sqlmock.NewRows([]string{"x"}).AddRow(1))
	if err := mc.db.QueryRowContext(WithEventual(context.Background()), "SELECT x FROM t").Scan(&x); err != nil || x != 1 {
		t.Fatalf("eventual read: %v, %d (want the replica's 1)", err, x)
	}
}

// TestRouteSessionPrimaryReadAfterReplicaRead: a session's read on the
// primary right after its replica read first checks that the primary
// shows the transactions that replica shows as committed, and waits while
// it does not (visibility.go); the next primary read checks nothing.
func TestRouteSessionPrimaryReadAfterReplicaRead(t *testing.T) {
	mc := newMockCluster(t, 1, nil)
	mc.refresh()
	ctx := WithSession(context.Background(), NewSession())
	// Every expectation first: the session's replica read schedules a
	// background capture on the primary, which must not read the
	// primary's expectations while the test adds to them (go-sqlmock).
	mc.mocks[1].ExpectQuery("SELECT x FROM t").WillReturnRows(sqlmock.NewRows([]string{"x"}).AddRow(2))
	hidden := func(xids string) {
		mc.mocks[0].ExpectQuery(probe.PrimaryHiddenSQL).WillReturnRows(sqlmock.NewRows([]string{"xids"}).AddRow(xids))
	}
	hidden("{726}")
	mc.mocks[1].ExpectQuery(probe.ReplicaShowsSQL).WithArgs("{726}").WillReturnRows(sqlmock.NewRows([]string{"n"}).AddRow(1))
	hidden("{}")
	mc.mocks[0].ExpectQuery("SELECT x FROM t").WillReturnRows(sqlmock.NewRows([]string{"x"}).AddRow(2))
	mc.mocks[0].ExpectQuery("SELECT x FROM t").WillReturnRows(sqlmock.NewRows([]string{"x"}).AddRow(2))
	var x int
	if err := mc.db.QueryRowContext(ctx, "SELECT x FROM t").Scan(&x); err != nil {
		t.Fatal(err)
	}
	if err := mc.db.QueryRowContext(WithPrimary(ctx), "SELECT x FROM t").Scan(&x); err != nil {
		t.Fatal(err)
	}
	if got := mc.c.Stats().PrimaryVisibilityWaits; got != 1 {
		t.Fatalf("PrimaryVisibilityWaits %d, want 1", got)
	}
	if err := mc.db.QueryRowContext(WithPrimary(ctx), "SELECT x FROM t").Scan(&x); err != nil {
		t.Fatal(err)
	}
}

// TestRouteSessionPrimaryReadRetriedWhenItsCheckLosesTheConnection: the
// statement that makes the primary show what a session saw on a replica
// (visibility.go) runs on the read's own connection before the read; when
// that connection died with its server (a pooler restarted in front of
// the primary), the read is sent again on a new one, as when the read
// itself meets the dead connection.
func TestRouteSessionPrimaryReadRetriedWhenItsCheckLosesTheConnection(t *testing.T) {
	mc := newMockCluster(t, 1, nil)
	mc.refresh()
	ctx := WithSession(context.Background(), NewSession())
	reset := &pgconn.PgError{Code: "57P01", Severity: "FATAL", Message: "terminating connection due to administrator command"}
	mc.mocks[1].ExpectQuery("SELECT x FROM t").WillReturnRows(sqlmock.NewRows([]string{"x"}).AddRow(2))
	mc.mocks[0].ExpectQuery(probe.PrimaryHiddenSQL).WillReturnError(reset)
	mc.mocks[0].ExpectQuery(probe.PrimaryHiddenSQL).WillReturnRows(sqlmock.NewRows([]string{"xids"}).AddRow("{}"))
	mc.mocks[0].ExpectQuery("SELECT x FROM t").WillReturnRows(sqlmock.NewRows([]string{"x"}).AddRow(2))
	var x int
	if err := mc.db.QueryRowContext(ctx, "SELECT x FROM t").Scan(&x); err != nil {
		t.Fatal(err)
	}
	if err := mc.db.QueryRowContext(WithPrimary(ctx), "SELECT x FROM t").Scan(&x); err != nil || x != 2 {
		t.Fatalf("primary read = %d, %v; want 2 from the retry on a new connection", x, err)
	}
	if got := mc.c.Stats().ConnLostRetries; got != 1 {
		t.Fatalf("conn-lost retries %d, want 1", got)
	}
}

// TestRouteReadOnlyTxOutlivesALostConnection: a pooler or server restart
// ends a read-only transaction's connection. Before its first statement
// answered, nothing of it was seen: it begins again elsewhere (the read's
// retry policy: another replica, else the primary) and the statement
// runs there. At COMMIT, the reads it returned stand: the server rolled
// back a transaction that changed nothing, so Commit reports no error.
// A serializable one (certified only by its COMMIT) and a read-write one
// report the loss.
func TestRouteReadOnlyTxOutlivesALostConnection(t *testing.T) {
	mc := newMockCluster(t, 1, nil)
	mc.refresh()
	lost := &pgconn.PgError{Code: "57P01", Severity: "FATAL", Message: "terminating connection due to administrator command"}
	one := func() *sqlmock.Rows { return sqlmock.NewRows([]string{"x"}).AddRow(1) }
	// All expectations up front: the pool closes a dead connection in a
	// goroutine of its own, and sqlmock's Close reads the expectations.
	mc.mocks[1].ExpectBegin()
	mc.mocks[1].ExpectQuery("SELECT 1").WillReturnError(lost)
	mc.mocks[0].ExpectBegin()
	mc.mocks[0].ExpectQuery("SELECT 1").WillReturnRows(one())
	mc.mocks[0].ExpectCommit().WillReturnError(lost)
	mc.mocks[1].ExpectBegin()
	mc.mocks[1].ExpectQuery("SELECT 1").WillReturnRows(one())
	mc.mocks[1].ExpectQuery("SELECT 2").WillReturnError(lost)
	mc.mocks[1].ExpectBegin()
	mc.mocks[1].ExpectPrepare("SELECT 3").ExpectQuery().WillReturnRows(one())
	mc.mocks[1].ExpectQuery("SELECT 2").WillReturnError(lost)
	others := []*sql.TxOptions{{ReadOnly: true, Isolation: sql.LevelSerializable}, nil}
	for range others {
		mc.mocks[0].ExpectBegin()
		mc.mocks[0].ExpectQuery("SELECT 1").WillReturnRows(one())
		mc.mocks[0].ExpectCommit().WillReturnError(lost)
	}

	ro := &sql.TxOptions{ReadOnly: true}
	tx, err := mc.db.BeginTx(context.Background(), ro)
	if err != nil {
		t.Fatal(err)
	}
	var x int
	if err := tx.QueryRow("SELECT 1").Scan(&x); err != nil || x != 1 {
		t.Fatalf("first statement = %d, %v; want 1, begun again on the primary", x, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("read-only commit lost = %v, want nil", err)
	}

	// After a statement answered, a loss is the caller's to see.
	mc.refresh()
	if tx, err = mc.db.BeginTx(context.Background(), ro); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow("SELECT 1").Scan(&x); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow("SELECT 2").Scan(&x); !errors.Is(err, lost) {
		t.Fatalf("second statement = %v, want the lost connection", err)
	}
	tx.Rollback()
	// A prepared statement's answer counts as much as a query's.
	mc.refresh()
	if tx, err = mc.db.BeginTx(context.Background(), ro); err != nil {
		t.Fatal(err)
	}
	st, err := tx.Prepare("SELECT 3")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.QueryRow().Scan(&x); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow("SELECT 2").Scan(&x); !errors.Is(err, lost) {
		t.Fatalf("statement after a prepared one = %v, want the lost connection", err)
	}
	tx.Rollback()

	for _, opts := range others {
		mc.refresh()
		if tx, err = mc.db.BeginTx(context.Background(), opts); err != nil {
			t.Fatal(err)
		}
		if err := tx.QueryRow("SELECT 1").Scan(&x); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); !errors.Is(err, lost) {
			t.Fatalf("commit lost (%+v) = %v, want the lost connection", opts, err)
		}
	}
}
