package pgreplicapgx

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgreplica/pgreplica/internal/pgxroute"
)

// Conn is one primary connection held by the caller (from Acquire), for
// what needs one session: SET, LISTEN, advisory locks, temporary tables,
// a transaction spread over calls. Every statement runs there; writes are
// recorded as the pool's are. Release gives it back: a connection whose
// session changed (a statement the classifier sees as session state, or
// anything done on the raw pgx connection) is closed rather than reused,
// so its state reaches nobody else. A Conn is not safe for concurrent
// use, like *pgxpool.Conn.
type Conn struct {
	l        pgxroute.Lease
	raw      bool
	released bool
}

// Acquire pins one primary connection until Release.
func (p *Pool) Acquire(ctx context.Context) (*Conn, error) {
	l, err := p.route(ctx, pgxroute.Request{Kind: pgxroute.Pin}, func(*pgx.Conn) error { return nil })
	if err != nil {
		return nil, err
	}
	return &Conn{l: l}, nil
}

// Release gives the connection back. It is safe to call more than once.
func (c *Conn) Release() {
	if c.released {
		return
	}
	c.released = true
	if c.raw {
		c.l.Wrote() // what ran on the raw connection may have written
	}
	c.l.Done(nil)
}

// Conn returns the raw pgx connection. What runs on it is not classified:
// the connection is closed, not reused, after Release, and it counts as a
// write then.
func (c *Conn) Conn() *pgx.Conn {
	c.raw = true
	c.l.Dirty()
	return c.l.Conn()
}

// wrote records a write that returned err: a ticket when it succeeded, a
// typed error (pgreplica.ErrWriteOutcomeUnknown) when its outcome is lost.
func (c *Conn) wrote(writes bool, err error) error {
	switch {
	case !writes:
		return err
	case err == nil:
		c.l.Wrote()
		return nil
	}
	return c.l.WriteFailed(err)
}

func (c *Conn) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	w := c.l.Note(sql)
	tag, err := c.l.Conn().Exec(ctx, sql, args...)
	return tag, c.wrote(w, err)
}

func (c *Conn) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	r, err := c.query(ctx, sql, args)
	if err != nil {
		return errRows{err}, err
	}
	return r, nil
}

func (c *Conn) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	r, err := c.query(ctx, sql, args)
	if err != nil {
		return errRow{err}
	}
	return (*row)(r)
}

func (c *Conn) query(ctx context.Context, sql string, args []any) (*rows, error) {
	w := c.l.Note(sql)
	r := &rows{done: func(err error) { c.wrote(w && err == nil, err) }}
	if err := r.start(ctx, c.l.Conn(), sql, args); err != nil {
		return nil, c.wrote(w, err)
	}
	return r, nil
}

func (c *Conn) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	inner := c.l.Conn().SendBatch(ctx, b)
	br := &batchResults{BatchResults: inner}
	sqls := make([]string, 0, len(b.QueuedQueries))
	for _, q := range b.QueuedQueries {
		sqls = append(sqls, q.SQL)
	}
	if inner.Tx() != nil {
		// A transaction it began records what it wrote at Commit.
		br.tx = batchTx(inner, c.l, sqls[1:], true)
		br.done = func(error) {}
		return br
	}
	w := false
	for _, q := range sqls {
		w = c.l.Note(q) || w
	}
	br.done = func(err error) { c.wrote(w && err == nil, err) }
	return br
}

func (c *Conn) CopyFrom(ctx context.Context, tableName pgx.Identifier, columnNames []string, rowSrc pgx.CopyFromSource) (int64, error) {
	n, err := c.l.Conn().CopyFrom(ctx, tableName, columnNames, rowSrc)
	return n, c.wrote(true, err)
}

func (c *Conn) Begin(ctx context.Context) (pgx.Tx, error) {
	return c.BeginTx(ctx, pgx.TxOptions{})
}

// BeginTx starts a transaction on the held connection; the connection
// stays held after it ends.
func (c *Conn) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	inner, err := c.l.Conn().BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &tx{Tx: inner, st: &txState{l: c.l, pinned: true}, outer: true}, nil
}

func (c *Conn) Ping(ctx context.Context) error { return c.l.Conn().Ping(ctx) }
