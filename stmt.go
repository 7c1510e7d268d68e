package pgreplica

import (
	"context"
	"database/sql/driver"
	"errors"
	"slices"

	"github.com/pgreplica/pgreplica/internal/inner"
	"github.com/pgreplica/pgreplica/internal/stmtclass"
)

// stmt is a prepared statement of a virtual conn. It is one of two kinds,
// both made by PrepareContext after the server described the statement (so
// a statement the server rejects fails at Prepare, and NumInput is the
// server's, as with pgx and lib/pq):
//
//   - Routed (inner == nil): outside a transaction or pin it keeps the text,
//     its classification and the parameter count, and is routed like a
//     plain call each time it runs; the inner driver prepares (and caches)
//     it on whichever physical conn runs it.
//   - Bound (inner != nil): on a conn in a transaction or pinned by session
//     state it is the inner driver's own statement on that physical conn,
//     so that driver-specific statements (lib/pq's CopyIn) work; the
//     physical conn keeps it prepared for the next transaction. It stays
//     bound while the conn holds res; a transaction that ends closes it
//     (closeBound) and it is routed from then on, because database/sql
//     keeps a statement that Tx.Stmt prepared for later use of its
//     *sql.Stmt on the same conn outside the transaction.
type stmt struct {
	cn       *conn
	query    string
	cls      stmtclass.Class
	numInput int

	inner driver.Stmt
	p     *physical // where inner was prepared
}

var (
	_ driver.Stmt              = (*stmt)(nil)
	_ driver.StmtExecContext   = (*stmt)(nil)
	_ driver.StmtQueryContext  = (*stmt)(nil)
	_ driver.NamedValueChecker = (*stmt)(nil)
)

// PrepareContext prepares like the inner driver does (see stmt). Outside a
// transaction or pin it describes the statement on the primary and closes
// the description at once (describe), so routing per call stays as it was
// and only Prepare pays a round trip, as it does with the inner drivers.
func (cn *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if cn.closed {
		return nil, driver.ErrBadConn
	}
	cls := cn.c.classes.Classify(query)
	if l := cn.sticky(); l != nil {
		st, err := l.p.prepareStmt(ctx, query)
		if err != nil {
			return nil, err
		}
		s := &stmt{cn: cn, query: query, cls: cls, numInput: st.NumInput(), inner: st, p: l.p}
		cn.bound = append(cn.bound, s)
		return s, nil
	}
	n, err := cn.c.describe(ctx, query, cls)
	if err != nil {
		return nil, err
	}
	return &stmt{cn: cn, query: query, cls: cls, numInput: n}, nil
}

// Prepare implements driver.Conn.
func (cn *conn) Prepare(query string) (driver.Stmt, error) {
	return cn.PrepareContext(context.Background(), query)
}

// closeBound closes the inner statements prepared on p, before p goes
// back to its pool (a transaction ends, a pinned conn closes): database/sql
// closes a transaction's statements only after Commit or Rollback
// returned, when the physical conn already serves someone else.
func (cn *conn) closeBound(p *physical) {
	cn.bound = slices.DeleteFunc(cn.bound, func(s *stmt) bool {
		if s.p != p {
			return false
		}
		s.closeInner(true)
		return true
	})
}

// bound returns the inner statement when it runs there now: the conn
// still holds the physical conn it was prepared on.
func (s *stmt) bound() driver.Stmt {
	if l := s.cn.sticky(); s.inner != nil && l != nil && l.p == s.p {
		return s.inner
	}
	return nil
}

// closeInner gives the inner statement back to the physical conn the
// virtual conn still holds: kept prepared there when the conn gives the
// connection back (keep; internal/keptstmt), closed when its user closed it.
func (s *stmt) closeInner(keep bool) error {
	if s.inner == nil {
		return nil
	}
	err := s.p.releaseStmt(s.query, s.inner, keep)
	s.inner = nil
	return err
}

func (s *stmt) Close() error {
	if s.inner == nil {
		return nil
	}
	s.cn.bound = slices.DeleteFunc(s.cn.bound, func(b *stmt) bool { return b == s })
	if s.bound() == nil {
		// The physical conn went back to its pool (closeBound should have
		// closed the statement then); it is no longer ours to use.
		s.inner = nil
		return nil
	}
	return s.closeInner(false)
}

// NumInput returns the server's parameter count (or, for a bound
// statement, what the inner statement reports: -1 for lib/pq's CopyIn), so
// database/sql checks the argument count as with the inner driver.
func (s *stmt) NumInput() int { return s.numInput }

// CheckNamedValue converts arguments as database/sql would for the inner
// statement: with the inner statement's NamedValueChecker, else the inner
// conn's, else (ErrSkip) database/sql's default conversion. A routed
// statement accepts every value: the physical conn that runs it converts
// (see inner.ConvertArgs).
func (s *stmt) CheckNamedValue(nv *driver.NamedValue) error {
	st := s.bound()
	if st == nil {
		return nil
	}
	if c, ok := st.(driver.NamedValueChecker); ok {
		return c.CheckNamedValue(nv)
	}
	if c, ok := s.p.conn.(driver.NamedValueChecker); ok {
		return c.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

// bind returns the inner statement to run s on the connection the
// conn holds now (a transaction's, or one pinned by session state): the
// one bound there, or, for a statement prepared while the conn held none,
// one kept prepared on that connection (internal/keptstmt), bound from now on.
// go-tpc and many services prepare statements on a *sql.Conn and run them
// inside the transactions they begin on it; with the inner driver alone
// each run costs one round trip, and so it does here after the first.
// nil: the conn holds no connection, and s is routed.
func (s *stmt) bind(ctx context.Context, args []driver.NamedValue) (driver.Stmt, error) {
	if st := s.bound(); st != nil {
		return st, nil
	}
	l := s.cn.sticky()
	if l == nil {
		return nil, nil
	}
	// database/sql converted args for a routed statement (CheckNamedValue
	// accepted them as they were): convert them for this connection.
	if err := inner.ConvertArgs(l.p.conn, args); err != nil {
		return nil, err
	}
	st, err := l.p.prepareStmt(ctx, s.query)
	if err != nil {
		return nil, err
	}
	s.inner, s.p = st, l.p // a statement bound to an earlier connection was released with it (closeBound)
	s.cn.bound = append(s.cn.bound, s)
	return st, nil
}

func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	st, err := s.bind(ctx, args)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return s.cn.exec(ctx, s.query, s.cls, args)
	}
	cn, p := s.cn, s.p
	p.note(s.cls)
	if cn.tx != nil {
		cn.tx.noteStatement(s.cls)
		return execStmt(ctx, st, args)
	}
	// A pinned conn outside a transaction: a write committed, and its LSN
	// is read after it.
	var pl plan
	if err := cn.c.planFor(ctx, onPrimary(s.cls), &pl); err != nil {
		return nil, err
	}
	r, err := execStmt(ctx, st, args)
	if err == nil && pl.capture {
		t := cn.c.wrote(&pl, p, s.cls.AsyncCommit)
		if pl.replicated > 0 {
			return r, cn.c.awaitReplicated(ctx, &pl, t)
		}
	}
	if err != nil && pl.capture {
		err = cn.c.writeFailed(p, err)
	}
	return r, err
}

func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	st, err := s.bind(ctx, args)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return s.cn.query(ctx, s.query, s.cls, args)
	}
	cn, p := s.cn, s.p
	p.note(s.cls)
	var pl plan
	if err := cn.c.planFor(ctx, onPrimary(s.cls), &pl); err != nil {
		return nil, err
	}
	rows, err := queryStmt(ctx, st, args)
	if err != nil {
		if cn.tx == nil && pl.capture {
			err = cn.c.writeFailed(p, err)
		}
		return nil, err
	}
	if cn.tx != nil {
		cn.tx.noteStatement(s.cls)
		return rows, nil
	}
	return cn.stickyRows(ctx, &pl, p, rows), nil
}

func (s *stmt) Exec(args []driver.Value) (driver.Result, error) {
	return s.ExecContext(context.Background(), named(args))
}

func (s *stmt) Query(args []driver.Value) (driver.Rows, error) {
	return s.QueryContext(context.Background(), named(args))
}

// execStmt and queryStmt run an inner statement as database/sql would
// (ctxDriverStmtExec, ctxDriverStmtQuery): lib/pq's CopyIn implements only
// the legacy Exec.
func execStmt(ctx context.Context, st driver.Stmt, args []driver.NamedValue) (driver.Result, error) {
	if se, ok := st.(driver.StmtExecContext); ok {
		return se.ExecContext(ctx, args)
	}
	vals, err := values(args)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	//lint:ignore SA1019 the fallback database/sql uses too
	return st.Exec(vals)
}

func queryStmt(ctx context.Context, st driver.Stmt, args []driver.NamedValue) (driver.Rows, error) {
	if sq, ok := st.(driver.StmtQueryContext); ok {
		return sq.QueryContext(ctx, args)
	}
	vals, err := values(args)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	//lint:ignore SA1019 the fallback database/sql uses too
	return st.Query(vals)
}

// values drops the ordinals for the legacy interfaces, which cannot take
// named arguments (database/sql's namedValueToValue).
func values(args []driver.NamedValue) ([]driver.Value, error) {
	vals := make([]driver.Value, len(args))
	for i, a := range args {
		if a.Name != "" {
			return nil, errors.New("sql: driver does not support the use of Named Parameters")
		}
		vals[i] = a.Value
	}
	return vals, nil
}

func named(args []driver.Value) []driver.NamedValue {
	nv := make([]driver.NamedValue, len(args))
	for i, v := range args {
		nv[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
	}
	return nv
}
