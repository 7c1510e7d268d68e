package pgreplica

import (
	"context"
	"database/sql/driver"
	"errors"

	"github.com/pgreplica/pgreplica/internal/inner"
	"github.com/pgreplica/pgreplica/internal/stmtclass"
	"github.com/pgreplica/pgreplica/internal/stmtset"
)

// The virtual connection database/sql pools (conn), its statements
// outside a transaction, and the rows of its queries (leasedRows,
// capturingRows).

// conn is the virtual connection database/sql pools. It holds no socket:
// each statement borrows a physical connection from the host the router
// picks. Only a transaction, or session state a statement created (SET,
// temp tables, LISTEN, ...), pins one physical connection to it.
type conn struct {
	c *Connector
	// pinned is the primary connection that holds this conn's session
	// state; every statement runs there until database/sql discards this
	// conn (IsValid reports false, so it is never handed to someone else).
	pinned *lease
	tx     *tx
	// txBuf holds the conn's transactions, one at a time (database/sql
	// begins the next only once the last ended): no allocation per
	// transaction.
	txBuf  tx
	closed bool
	// bound are the open statements prepared on the pinned or transaction
	// connection (see stmt).
	bound []*stmt
	// ownsConnector is set by Driver.Open, which made a connector for this
	// conn alone.
	ownsConnector bool
}

// Each optional interface is implemented on purpose: without it
// database/sql falls back to a slower path (Prepare + Stmt for every call
// without ExecerContext/QueryerContext, Begin without isolation levels
// without ConnBeginTx) or to its own argument conversion (which would run
// before the inner driver's NamedValueChecker can see the value).
var (
	_ driver.Conn               = (*conn)(nil)
	_ driver.ConnBeginTx        = (*conn)(nil)
	_ driver.ConnPrepareContext = (*conn)(nil)
	_ driver.ExecerContext      = (*conn)(nil)
	_ driver.QueryerContext     = (*conn)(nil)
	_ driver.Pinger             = (*conn)(nil)
	_ driver.SessionResetter    = (*conn)(nil)
	_ driver.Validator          = (*conn)(nil)
	_ driver.NamedValueChecker  = (*conn)(nil)
)

// ExecContext runs a statement on the primary (or the pinned/transaction
// connection).
func (cn *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	return cn.exec(ctx, query, cn.c.classes.Classify(query), args)
}

// QueryContext runs a query on a replica when it is provably a read and the
// context's requirement allows it, else on the primary.
func (cn *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	return cn.query(ctx, query, cn.c.classes.Classify(query), args)
}

// exec runs a statement on the primary: Exec returns no rows, so a read
// sent through it gains nothing from a replica.
func (cn *conn) exec(ctx context.Context, query string, cls stmtclass.Class, args []driver.NamedValue) (driver.Result, error) {
	if cn.closed {
		return nil, driver.ErrBadConn
	}
	var pl plan
	if err := cn.c.planFor(ctx, onPrimary(cls), &pl); err != nil {
		return nil, err
	}
	if l := cn.sticky(); l != nil {
		if err := inner.ConvertArgs(l.p.conn, args); err != nil {
			return nil, err
		}
		t := cn.tx
		r, err := cn.execOn(ctx, &pl, l.p, query, cls, args)
		if err != nil && t.beginAgain(ctx, err) {
			if err = inner.ConvertArgs(t.lease.p.conn, args); err == nil {
				r, err = cn.execOn(ctx, &pl, t.lease.p, query, cls, args)
			}
		}
		if t != nil {
			t.used = true
		} else if pl.capture {
			err = cn.c.writeFailed(l.p, err)
		}
		return r, err
	}
	var r driver.Result
	l, err := cn.c.route(ctx, &pl, &statement{args: args}, func(ctx context.Context, p *physical) (err error) {
		r, err = cn.execOn(ctx, &pl, p, query, cls, args)
		return err
	})
	if err != nil {
		return nil, err
	}
	if cls.SessionState {
		l.watch.end() // the statement is over; the connection stays
		cn.pinned = pin(l)
	} else {
		l.release(nil)
	}
	return r, nil
}

// execOn runs a statement on p, its args already converted for p.
// Outside a transaction a write commits at once, so its LSN is captured
// with it.
func (cn *conn) execOn(ctx context.Context, pl *plan, p *physical, query string, cls stmtclass.Class, args []driver.NamedValue) (driver.Result, error) {
	p.note(cls)
	if cn.tx != nil {
		cn.tx.noteStatement(cls)
		return inner.Exec(ctx, p.conn, query, args)
	}
	r, err := inner.Exec(ctx, p.conn, query, args)
	if err == nil && pl.capture {
		t := cn.c.wrote(pl, p, cls.AsyncCommit)
		if pl.replicated > 0 {
			return r, cn.c.awaitReplicated(ctx, pl, t)
		}
	}
	return r, err
}

func (cn *conn) query(ctx context.Context, query string, cls stmtclass.Class, args []driver.NamedValue) (driver.Rows, error) {
	if cn.closed {
		return nil, driver.ErrBadConn
	}
	sticky := cn.sticky()
	if sticky == nil {
		routeClass(&cn.c.refused, query, &cls)
	}
	var pl plan
	if err := cn.c.planFor(ctx, cls, &pl); err != nil {
		return nil, err
	}
	if sticky != nil {
		t := cn.tx
		rows, err := cn.queryOn(ctx, &pl, sticky.p, query, cls, args)
		if err != nil && t.beginAgain(ctx, err) {
			rows, err = cn.queryOn(ctx, &pl, t.lease.p, query, cls, args)
		}
		if t != nil {
			t.used = true
		}
		return rows, err
	}
	st := statement{query: query, args: args, cls: cls, inFlight: cn.c.flights}
	l, err := cn.c.route(ctx, &pl, &st, nil)
	if err != nil {
		return nil, err
	}
	rows := st.rows
	if cls.SessionState {
		l.watch.end() // the connection outlives the statement's context
		cn.pinned = pin(l)
		return cn.stickyRows(ctx, &pl, l.p, rows), nil
	}
	lr := &leasedRows{pl: pl, l: l}
	lr.Rows.Rows, lr.After = rows, lr
	if pl.replicated > 0 {
		lr.ctx = ctx
	}
	return lr, nil
}

// queryOn runs a query on the pinned or transaction connection, which
// stays borrowed after the rows close.
func (cn *conn) queryOn(ctx context.Context, pl *plan, p *physical, query string, cls stmtclass.Class, args []driver.NamedValue) (driver.Rows, error) {
	p.note(cls)
	if err := inner.ConvertArgs(p.conn, args); err != nil {
		return nil, err
	}
	rows, err := inner.Query(ctx, p.conn, query, args)
	if err != nil {
		if cn.tx == nil && pl.capture {
			err = cn.c.writeFailed(p, err)
		}
		return nil, err
	}
	if cn.tx != nil {
		cn.tx.noteStatement(cls)
		if cn.tx.readOnly() {
			return &inner.Rows{Rows: rows, Read: true}, nil
		}
		return rows, nil
	}
	return cn.stickyRows(ctx, pl, p, rows), nil
}

// stickyRows captures the LSN of a write outside a transaction once its
// rows are done (INSERT … RETURNING on a pinned connection).
func (cn *conn) stickyRows(ctx context.Context, pl *plan, p *physical, rows driver.Rows) driver.Rows {
	if !pl.capture {
		return rows
	}
	cr := &capturingRows{c: cn.c, pl: *pl, p: p}
	cr.Rows.Rows, cr.After = rows, cr
	if pl.replicated > 0 {
		cr.ctx = ctx
	}
	return cr
}

// leasedRows are the rows of a routed query (one allocation per query):
// once database/sql closes them, what the plan asks happens (capture a
// write's position, bound a session read) and the connection goes back.
type leasedRows struct {
	inner.Rows
	pl plan
	l  lease
	// ctx is the query's, kept only when its write waits for replicas
	// (WithReplicated).
	ctx context.Context
}

func (r *leasedRows) AfterRows(err error) error {
	var ticket uint64
	if err == nil {
		ticket = r.l.c.finish(&r.pl, &r.l)
	}
	c := r.l.c
	r.l.release(err) // the connection goes back before any wait
	if ticket != 0 && r.pl.replicated > 0 {
		return c.awaitReplicated(r.ctx, &r.pl, ticket)
	}
	return nil
}

// capturingRows are the rows of a write on a pinned connection: its LSN
// is captured once they are done; the connection stays pinned.
type capturingRows struct {
	inner.Rows
	c   *Connector
	pl  plan
	p   *physical
	ctx context.Context // as leasedRows'
}

func (r *capturingRows) AfterRows(err error) error {
	if err == nil {
		t := r.c.wrote(&r.pl, r.p, false)
		if r.pl.replicated > 0 {
			return r.c.awaitReplicated(r.ctx, &r.pl, t)
		}
	}
	return nil
}

// pin returns a copy of l for cn.pinned: taking l's own address would
// move every statement's lease to the heap, pinned or not.
func pin(l lease) *lease { return &l }

// sticky returns the lease this virtual conn is bound to, if any.
func (cn *conn) sticky() *lease {
	if cn.tx != nil {
		return &cn.tx.lease
	}
	return cn.pinned
}

// routeClass is the one adjustment of a query's class, in either door,
// before it is routed outside a pinned connection: a statement that sets
// session state goes to the primary (it pins, and only the primary keeps
// it), and one a replica refused before (SQLSTATE 25006) is a write.
func routeClass(refused *stmtset.Set, query string, cls *stmtclass.Class) {
	if cls.SessionState {
		cls.Hint = stmtclass.HintPrimary // as onPrimary
	} else if refused.Has(query) {
		cls.Read = false // as classWrite
	}
}

// onPrimary marks a statement for the primary whatever it is.
func onPrimary(cls stmtclass.Class) stmtclass.Class {
	cls.Hint = stmtclass.HintPrimary
	return cls
}

// classWrite treats a statement as a write (a replica refused it).
func classWrite(cls stmtclass.Class) stmtclass.Class {
	cls.Read = false
	return cls
}

// Begin implements driver.Conn; database/sql uses BeginTx.
func (cn *conn) Begin() (driver.Tx, error) {
	return cn.BeginTx(context.Background(), driver.TxOptions{})
}

// Ping checks that the primary answers (or reports why there is none:
// ErrNoPrimary, ErrSplitBrain, ErrNoReachableHost), and that the role has
// the privileges the configuration needs (ErrInsufficientPrivilege).
func (cn *conn) Ping(ctx context.Context) error {
	if cn.closed {
		return driver.ErrBadConn
	}
	if err := cn.c.privilegeErr(cn.c.topo.Load()); err != nil {
		return err
	}
	l, err := cn.c.leasePrimary(ctx, cn.c.topo.Load(), false)
	if err != nil {
		return err
	}
	if pg, ok := l.p.conn.(driver.Pinger); ok {
		err = pg.Ping(ctx)
	}
	l.release(err)
	return err
}

// ResetSession is called before database/sql reuses this conn. A virtual
// conn carries no server state of its own; a pinned one is never reused
// (see IsValid).
func (cn *conn) ResetSession(context.Context) error {
	if cn.closed {
		return driver.ErrBadConn
	}
	return nil
}

// IsValid reports false for a conn that pinned session state, so
// database/sql closes it instead of pooling it; closing closes the physical
// connection, so its session state reaches nobody else.
func (cn *conn) IsValid() bool {
	return !cn.closed && cn.pinned == nil && cn.tx == nil
}

// CheckNamedValue accepts every argument: the conversion happens on the
// physical connection that runs the statement (see inner.ConvertArgs), because
// the inner driver decides what it accepts.
func (cn *conn) CheckNamedValue(*driver.NamedValue) error { return nil }

// Close ends any transaction left open and gives back a pinned physical
// connection, which the pool closes: its session state goes with it.
func (cn *conn) Close() error {
	if cn.closed {
		return nil
	}
	cn.closed = true
	if cn.tx != nil {
		cn.tx.Rollback()
	}
	if cn.pinned != nil {
		l := cn.pinned
		cn.closeBound(l.p)
		cn.pinned = nil
		l.release(nil) // a dirty connection is closed, not reused
	}
	if cn.ownsConnector {
		cn.c.Close()
	}
	return nil
}

var errTxDone = errors.New("pgreplica: transaction already committed or rolled back")
