package pgreplica

import (
	"context"
	"database/sql/driver"
	"errors"

	"github.com/jackc/puddle/v2"
)

// conn is the virtual connection database/sql pools. It holds no socket:
// each statement borrows a physical connection from the host the router
// picks. Only a transaction, or session state a statement created (SET,
// temp tables, LISTEN, ...), pins one physical connection to it.
type conn struct {
	c *Connector
	// pinned is the primary connection that holds this conn's session
	// state; every statement runs there until database/sql discards this
	// conn (IsValid reports false, so it is never handed to someone else).
	pinned *puddle.Resource[*physical]
	tx     *tx
	closed bool
	// bound are the open statements prepared on the pinned or transaction
	// connection (see stmt).
	bound []*stmt
	// ownsConnector is set by Driver.Open, which made a connector for this
	// conn alone.
	ownsConnector bool
}

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
	return cn.exec(ctx, query, cn.c.classes.classify(query), args)
}

// QueryContext runs a query on a replica when it is provably a read and the
// context's requirement allows it, else on the primary.
func (cn *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	return cn.query(ctx, query, cn.c.classes.classify(query), args)
}

func (cn *conn) exec(ctx context.Context, query string, cls stmtClass, args []driver.NamedValue) (driver.Result, error) {
	if cn.closed {
		return nil, driver.ErrBadConn
	}
	if res := cn.sticky(); res != nil {
		return cn.execOn(ctx, res.Value(), query, cls, args)
	}
	res, err := cn.c.acquirePrimary(ctx)
	if err != nil {
		return nil, err
	}
	if cls.sessionState {
		cn.pinned = res
		return cn.execOn(ctx, res.Value(), query, cls, args)
	}
	r, err := cn.execOn(ctx, res.Value(), query, cls, args)
	res.Value().node.pool.release(res, err)
	return r, err
}

// execOn runs a statement on p. Outside a transaction a write commits at
// once, so its LSN is captured here.
func (cn *conn) execOn(ctx context.Context, p *physical, query string, cls stmtClass, args []driver.NamedValue) (driver.Result, error) {
	cn.noteSession(p, cls)
	if err := convertArgs(p.conn, args); err != nil {
		return nil, err
	}
	if cn.tx != nil {
		cn.tx.noteStatement(cls)
		return execInner(ctx, p.conn, query, args)
	}
	if cls.read || cls.noWAL {
		return execInner(ctx, p.conn, query, args)
	}
	r, err := cn.c.execCapture(ctx, p, query, cls, args)
	return r, cn.c.writeFailed(p.node, err)
}

func (cn *conn) query(ctx context.Context, query string, cls stmtClass, args []driver.NamedValue) (driver.Rows, error) {
	if cn.closed {
		return nil, driver.ErrBadConn
	}
	if res := cn.sticky(); res != nil {
		return cn.queryOn(ctx, res.Value(), query, cls, args)
	}
	if cls.sessionState {
		res, err := cn.c.acquirePrimary(ctx)
		if err != nil {
			return nil, err
		}
		cn.pinned = res
		return cn.queryOn(ctx, res.Value(), query, cls, args)
	}
	return cn.c.routeQuery(ctx, query, cls, args)
}

// sticky returns the physical conn this virtual conn is bound to, if any.
func (cn *conn) sticky() *puddle.Resource[*physical] {
	if cn.tx != nil {
		return cn.tx.res
	}
	return cn.pinned
}

// queryOn runs a query on the pinned or transaction connection, which
// stays borrowed after the rows close.
func (cn *conn) queryOn(ctx context.Context, p *physical, query string, cls stmtClass, args []driver.NamedValue) (driver.Rows, error) {
	cn.noteSession(p, cls)
	if err := convertArgs(p.conn, args); err != nil {
		return nil, err
	}
	rows, err := queryInner(ctx, p.conn, query, args)
	if err != nil {
		if cn.tx == nil && !cls.read {
			err = cn.c.writeFailed(p.node, err)
		}
		return nil, err
	}
	if cn.tx != nil {
		cn.tx.noteStatement(cls)
		return rows, nil
	}
	if cls.read || cls.noWAL {
		return rows, nil
	}
	return cn.c.captureOnClose(ctx, p, cls, rows, nil), nil
}

func (cn *conn) noteSession(p *physical, cls stmtClass) {
	if cls.sessionState {
		p.dirty = true
	}
	if cls.asyncCommit {
		p.asyncCommit = true
	}
}

// Begin implements driver.Conn; database/sql uses BeginTx.
func (cn *conn) Begin() (driver.Tx, error) {
	return cn.BeginTx(context.Background(), driver.TxOptions{})
}

// Ping checks that the primary answers (or reports why there is none:
// ErrNoPrimary, ErrSplitBrain, ErrNoReachableHost).
func (cn *conn) Ping(ctx context.Context) error {
	if cn.closed {
		return driver.ErrBadConn
	}
	res, err := cn.c.acquirePrimary(ctx)
	if err != nil {
		return err
	}
	p := res.Value()
	if pg, ok := p.conn.(driver.Pinger); ok {
		err = pg.Ping(ctx)
	}
	p.node.pool.release(res, err)
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
// database/sql closes it instead of pooling it; closing cleans the physical
// connection (DISCARD ALL) before anyone else gets it.
func (cn *conn) IsValid() bool {
	return !cn.closed && cn.pinned == nil && cn.tx == nil
}

// CheckNamedValue accepts every argument: the conversion happens on the
// physical connection that runs the statement (see convertArgs), because
// the inner driver decides what it accepts.
func (cn *conn) CheckNamedValue(*driver.NamedValue) error { return nil }

// Close returns a pinned physical connection (cleaned) and ends any
// transaction left open.
func (cn *conn) Close() error {
	if cn.closed {
		return nil
	}
	cn.closed = true
	if cn.tx != nil {
		cn.tx.Rollback()
	}
	if cn.pinned != nil {
		res := cn.pinned
		cn.closeBound(res)
		cn.pinned = nil
		res.Value().node.pool.release(res, nil)
	}
	if cn.ownsConnector {
		cn.c.Close()
	}
	return nil
}

var errTxDone = errors.New("pgreplica: transaction already committed or rolled back")
