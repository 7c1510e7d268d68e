package pgreplica

import (
	"context"
	"errors"
	"testing"

	"github.com/DATA-DOG/go-sqlmock"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgreplica/pgreplica/internal/sqlstate"
)

// TestPrepareReturnsServerError: db.Prepare describes the statement on the
// primary, so a statement the server rejects fails at Prepare (as with pgx
// and lib/pq), and the description is closed at once; a good statement is
// still routed per call.
func TestPrepareReturnsServerError(t *testing.T) {
	mc := newMockCluster(t, 1, func(c *Config) { c.Consistency = ConsistencyEventual })
	syntax := &pgconn.PgError{Code: "42601", Message: `syntax error at or near "SELEC"`}
	mc.mocks[0].ExpectPrepare("SELEC 1").WillReturnError(syntax)
	if _, err := mc.db.Prepare("SELEC 1"); sqlstate.Of(err) != "42601" {
		t.Fatalf("Prepare(SELEC 1) = %v, want the server's syntax error", err)
	}

	q := "SELECT v FROM t WHERE id = $1"
	mc.mocks[0].ExpectPrepare(q).WillBeClosed()
	st, err := mc.db.Prepare(q)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	mc.mocks[1].ExpectQuery(q).WithArgs(7).WillReturnRows(sqlmock.NewRows([]string{"v"}).AddRow(1))
	var v int
	if err := st.QueryRow(7).Scan(&v); err != nil {
		t.Fatalf("prepared read on the replica: %v", err)
	}
}

// TestPrepareInTxIsInnerStatement: inside a transaction the statement is
// the inner driver's own (prepared and executed there, and kept prepared
// on the physical connection for the next transaction: not closed), and
// the transaction still knows it wrote: Commit captures the LSN.
func TestPrepareInTxIsInnerStatement(t *testing.T) {
	mc := newMockCluster(t, 1, nil)
	q := "INSERT INTO t VALUES ($1)"
	mc.mocks[0].ExpectBegin()
	prep := mc.mocks[0].ExpectPrepare(q)
	prep.ExpectExec().WithArgs(1).WillReturnResult(sqlmock.NewResult(1, 1))
	prep.ExpectExec().WithArgs(2).WillReturnResult(sqlmock.NewResult(2, 1))
	mc.mocks[0].ExpectCommit()
	mc.expectLSNCapture(0, "0/B00")
	tx, err := mc.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	st, err := tx.Prepare(q)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		if _, err := st.Exec(i); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := mc.processLSN(); got != 0xB00 {
		t.Fatalf("process watermark %s after the commit, want 0/B00: the prepared write was not tracked", got)
	}
}

// TestPreparedInTxThenOutside: Tx.Stmt prepares a *sql.Stmt on the
// transaction's conn, and database/sql keeps that driver statement for
// later use of the *sql.Stmt on the same conn outside the transaction. It
// is the inner driver's statement inside (kept prepared on the physical
// connection when the transaction gives it back) and routed again
// afterwards.
func TestPreparedInTxThenOutside(t *testing.T) {
	mc := newMockCluster(t, 1, func(c *Config) { c.Consistency = ConsistencyEventual })
	mc.db.SetMaxOpenConns(2)
	mc.db.SetMaxIdleConns(2)
	q := "SELECT v FROM t WHERE id = $1"
	mc.mocks[0].MatchExpectationsInOrder(false)
	mc.mocks[0].ExpectBegin()
	mc.mocks[0].ExpectPrepare(q).WillBeClosed() // db.Prepare's description
	inTx := mc.mocks[0].ExpectPrepare(q)
	inTx.ExpectQuery().WithArgs(1).WillReturnRows(sqlmock.NewRows([]string{"v"}).AddRow(1))
	mc.mocks[0].ExpectCommit()
	tx, err := mc.db.Begin() // virtual conn A
	if err != nil {
		t.Fatal(err)
	}
	st, err := mc.db.Prepare(q) // on virtual conn B: A is busy
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var v int
	if err := tx.Stmt(st).QueryRow(1).Scan(&v); err != nil { // prepared on A, in the transaction
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	// A was returned last, so database/sql hands it out first, with the
	// driver statement prepared on it in the transaction.
	mc.mocks[1].ExpectQuery(q).WithArgs(2).WillReturnRows(sqlmock.NewRows([]string{"v"}).AddRow(2))
	if err := st.QueryRow(2).Scan(&v); err != nil || v != 2 {
		t.Fatalf("after the transaction: %d, %v; want 2 from the replica", v, err)
	}
}

// TestTxStmtKeptAcrossTransactions: go-tpc's shape, a statement prepared
// on a *sql.Conn and used through Tx.Stmt in one transaction after the
// other. database/sql prepares it again on the conn at every Tx.Stmt and
// closes it when the transaction ends; the physical connection keeps the
// inner statement, so it is prepared there once (sqlmock fails a second
// Prepare), as pgx's stdlib does alone.
func TestTxStmtKeptAcrossTransactions(t *testing.T) {
	// One connection to the primary: each transaction borrows that one
	// (with more, each connection prepares the statement once).
	mc := newMockCluster(t, 1, func(c *Config) { c.MaxConnsPerHost = 1 })
	ctx := context.Background()
	cn, err := mc.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cn.Close()
	q := "UPDATE t SET v = v + 1 WHERE id = $1"
	mc.mocks[0].ExpectPrepare(q).WillBeClosed() // the description, outside
	st, err := cn.PrepareContext(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	mc.mocks[0].MatchExpectationsInOrder(false)
	inTx := mc.mocks[0].ExpectPrepare(q)
	for i := range 3 {
		mc.mocks[0].ExpectBegin()
		inTx.ExpectExec().WithArgs(i).WillReturnResult(sqlmock.NewResult(0, 1))
		mc.mocks[0].ExpectCommit()
		mc.expectLSNCapture(0, "0/500")
		tx, err := cn.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.StmtContext(ctx, st).ExecContext(ctx, i); err != nil {
			t.Fatalf("transaction %d: %v", i, err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		mc.settle()
	}
}

// TestPreparePinnedConnIsInnerStatement: on a conn pinned by session
// state the statement is the inner driver's own, on the pinned connection
// (which closes with it: its session state goes with it).
func TestPreparePinnedConnIsInnerStatement(t *testing.T) {
	mc := newMockCluster(t, 1, func(c *Config) { c.Consistency = ConsistencyEventual })
	ctx := context.Background()
	cn, err := mc.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	q := "SELECT * FROM things WHERE id = $1"
	mc.mocks[0].ExpectExec("SET search_path = app").WillReturnResult(sqlmock.NewResult(0, 0))
	mc.mocks[0].ExpectPrepare(q).ExpectQuery().WithArgs(3).WillReturnRows(sqlmock.NewRows([]string{"x"}).AddRow(3))
	if _, err := cn.ExecContext(ctx, "SET search_path = app"); err != nil {
		t.Fatal(err)
	}
	st, err := cn.PrepareContext(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	var x int
	if err := st.QueryRowContext(ctx, 3).Scan(&x); err != nil || x != 3 {
		t.Fatalf("pinned prepared read = %d, %v", x, err)
	}
	st.Close()
	mc.mocks[0].ExpectClose()
	cn.Close()
}

// TestPrepareWithoutPrimary: while there is no primary a provable read is
// described on a replica (database/sql prepares a *sql.Stmt again on every
// conn it uses, and reads must keep working through a failover); a write
// fails like an Exec would.
func TestPrepareWithoutPrimary(t *testing.T) {
	mc := newMockCluster(t, 1, func(c *Config) { c.Consistency = ConsistencyEventual })
	mc.set(0, roleReplica, 0x100)
	mc.refresh()
	for _, m := range mc.mocks {
		m.MatchExpectationsInOrder(false)
		m.ExpectPrepare("SELECT v FROM t").WillBeClosed()
	}
	st, err := mc.db.Prepare("SELECT v FROM t")
	if err != nil {
		t.Fatalf("Prepare of a read without a primary: %v", err)
	}
	st.Close()
	for i, m := range mc.mocks {
		mc.mocks[i] = &lenientMock{m} // one replica described it
	}
	if _, err := mc.db.Prepare("INSERT INTO t VALUES (1)"); !errors.Is(err, ErrNoPrimary) {
		t.Fatalf("Prepare of a write without a primary = %v, want ErrNoPrimary", err)
	}
}
