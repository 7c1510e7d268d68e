package pgreplicapgx

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgreplica/pgreplica/internal/pgxroute"
	"github.com/pgreplica/pgreplica/internal/sqlstate"
)

// Begin starts a read-write transaction on the primary.
func (p *Pool) Begin(ctx context.Context) (pgx.Tx, error) {
	return p.BeginTx(ctx, pgx.TxOptions{})
}

// BeginTx starts a transaction. A read-only one (AccessMode pgx.ReadOnly)
// below SERIALIZABLE runs on one replica that satisfies the context's
// requirement, with the same wait and fallback as a single read (a
// standby rejects SERIALIZABLE); when what is known of the replicas'
// replay cannot prove one fresh, the check is sent with BEGIN, in its
// flight. Every other transaction runs on the primary, and one that wrote
// is recorded when it commits.
func (p *Pool) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	kind := pgxroute.Tx
	if opts.AccessMode == pgx.ReadOnly && opts.IsoLevel != pgx.Serializable {
		kind = pgxroute.ReadOnlyTx
	}
	l, inner, err := p.begin(ctx, opts, kind)
	if err != nil {
		return nil, err
	}
	st := &txState{l: l, snapshot: kind == pgxroute.ReadOnlyTx}
	if st.snapshot {
		st.pool, st.opts = p, opts // for beginAgain
	}
	return &tx{Tx: inner, st: st, outer: true}, nil
}

// begin routes a transaction of kind and begins it where it lands.
func (p *Pool) begin(ctx context.Context, opts pgx.TxOptions, kind pgxroute.Kind) (pgxroute.Lease, pgx.Tx, error) {
	op := &txOp{ctx: ctx, opts: opts}
	l, err := p.routeOp(ctx, pgxroute.Request{Kind: kind, Guarded: op}, op)
	return l, op.inner, err
}

// tx is a transaction (or a savepoint inside one) on a leased connection.
// Every statement is classified on its way, so that Commit knows whether
// the transaction wrote.
type tx struct {
	pgx.Tx
	st    *txState
	outer bool // the transaction, not a savepoint
}

// txState is what a transaction and its savepoints share.
type txState struct {
	l pgxroute.Lease
	// wrote is set when a statement that is not provably a read ran.
	wrote bool
	// pinned: the lease belongs to a Conn from Acquire and outlives the
	// transaction.
	pinned bool
	ended  bool
	// snapshot: READ ONLY below SERIALIZABLE, whose reads stand without
	// their COMMIT (a serializable one's are certified only by it).
	snapshot bool
	// pool and opts begin a snapshot transaction again (beginAgain);
	// used is set once a statement of it was answered, or may have been.
	pool *Pool
	opts pgx.TxOptions
	used bool
	// lost: the connection was lost and the transaction not begun again.
	lost bool
}

// readOnly reports a snapshot transaction that ran only reads: its COMMIT
// changes nothing.
func (st *txState) readOnly() bool { return st.snapshot && !st.wrote }

func (t *tx) note(sql string) {
	if t.st.l.Note(sql) {
		t.st.wrote = true
	}
}

// Begin starts a savepoint, as pgx does.
func (t *tx) Begin(ctx context.Context) (pgx.Tx, error) {
	t.st.used = true
	sp, err := t.Tx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &tx{Tx: sp, st: t.st}, nil
}

// Commit commits; a transaction that wrote is recorded (its position is
// read later, shared), one that only read leaves what bounds its
// session's next read. The connection goes back to the pool.
func (t *tx) Commit(ctx context.Context) error {
	if !t.outer {
		return t.Tx.Commit(ctx)
	}
	st := t.st
	if st.ended {
		return pgx.ErrTxClosed
	}
	st.ended = true
	err := t.Tx.Commit(ctx)
	if err != nil && st.readOnly() && sqlstate.ConnLost(err) {
		// Lost at COMMIT: the server rolled back a transaction that
		// changed nothing; what it read bounds the session as after a
		// commit (Done(nil); the broken connection is not reused).
		if !st.pinned {
			st.l.Done(nil)
		}
		return nil
	}
	if st.wrote && !st.l.Replica() {
		if err == nil {
			st.l.Wrote()
		}
		err = st.l.WriteFailed(err)
	}
	if !st.pinned {
		st.l.Done(err)
	}
	return err
}

// Rollback rolls back; after Commit or Rollback it returns
// pgx.ErrTxClosed, so `defer tx.Rollback(ctx)` is safe.
func (t *tx) Rollback(ctx context.Context) error {
	if !t.outer {
		return t.Tx.Rollback(ctx)
	}
	st := t.st
	if st.ended {
		if st.lost {
			st.lost = false
			return nil // lost, and not begun again (beginAgain)
		}
		return pgx.ErrTxClosed
	}
	st.ended = true
	err := t.Tx.Rollback(ctx)
	if !st.pinned {
		st.l.Done(err)
	}
	return err
}

func (t *tx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	t.note(sql)
	tag, err := t.Tx.Exec(ctx, sql, args...)
	if err != nil && t.beginAgain(ctx, err) {
		t.note(sql)
		tag, err = t.Tx.Exec(ctx, sql, args...)
	}
	t.st.used = true
	return tag, err
}

func (t *tx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	t.note(sql)
	if !t.mayBeginAgain() {
		t.st.used = true
		return t.Tx.Query(ctx, sql, args...)
	}
	rows, err := t.Tx.Query(ctx, sql, args...)
	again := err != nil && t.beginAgain(ctx, err)
	if again {
		t.note(sql)
		rows, err = t.Tx.Query(ctx, sql, args...)
	}
	if err != nil {
		t.st.used = true
		return rows, err
	}
	return &firstRows{Rows: rows, t: t, ctx: ctx, sql: sql, args: args, again: again}, nil
}

func (t *tx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if t.st.readOnly() {
		rows, _ := t.Query(ctx, sql, args...) // noted there; its error is the rows'
		return readRow{rows}
	}
	t.note(sql)
	t.st.used = true
	return t.Tx.QueryRow(ctx, sql, args...)
}

// readRow is QueryRow's row in a read-only transaction: once the row
// came, a connection lost while its end was read is not reported (nor at
// Commit): the row stands.
type readRow struct{ rows pgx.Rows }

func (r readRow) Scan(dest ...any) error {
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	if err := r.rows.Err(); err != nil && !sqlstate.ConnLost(err) {
		return err
	}
	return nil
}

func (t *tx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	t.st.used = true
	for _, q := range b.QueuedQueries {
		t.note(q.SQL)
	}
	return t.Tx.SendBatch(ctx, b)
}

func (t *tx) CopyFrom(ctx context.Context, tableName pgx.Identifier, columnNames []string, rowSrc pgx.CopyFromSource) (int64, error) {
	t.st.used = true
	t.st.wrote = true
	return t.Tx.CopyFrom(ctx, tableName, columnNames, rowSrc)
}

// LargeObjects counts as a write: large objects are written through
// function calls the classifier does not see.
func (t *tx) LargeObjects() pgx.LargeObjects {
	t.st.wrote = true
	return t.Tx.LargeObjects()
}

// Prepare creates a named statement, session state that outlives the
// transaction: the connection is closed, not reused, after it.
func (t *tx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	t.st.used = true
	t.st.l.Dirty()
	return t.Tx.Prepare(ctx, name, sql)
}

// Conn returns the raw connection. What runs on it is not classified, so
// the transaction counts as a write and the connection is closed, not
// reused, after it.
func (t *tx) Conn() *pgx.Conn {
	t.st.l.Dirty()
	t.st.wrote = true
	return t.Tx.Conn()
}

var _ pgx.Tx = (*tx)(nil)
