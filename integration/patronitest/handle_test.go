//go:build linux

package patronitest

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"

	"github.com/pgreplica/pgreplica/pgreplicapgx"
)

// handle is what the sessions run statements through: a *sql.DB
// (pgreplica's, or the naive baseline's), or pgreplicapgx's pool
// (-patroni.handle=pgx, the checker's pgreplicapgx-session target).
type handle interface {
	querier
	// begin starts a transaction, read-only if asked.
	begin(ctx context.Context, readOnly bool) (tx, error)
}

// querier runs one statement.
type querier interface {
	// exec runs sql and returns the rows it affected.
	exec(ctx context.Context, sql string, args ...any) (int64, error)
	queryRow(ctx context.Context, sql string, args ...any) scanner
}

type scanner interface{ Scan(dest ...any) error }

// tx is a transaction of a handle.
type tx interface {
	querier
	commit() error
	rollback() error
}

// sqlHandle is a database/sql handle.
type sqlHandle struct{ db *sql.DB }

func (h sqlHandle) exec(ctx context.Context, q string, args ...any) (int64, error) {
	return rowsAffected(h.db.ExecContext(ctx, q, args...))
}

func (h sqlHandle) queryRow(ctx context.Context, q string, args ...any) scanner {
	return h.db.QueryRowContext(ctx, q, args...)
}

func (h sqlHandle) begin(ctx context.Context, readOnly bool) (tx, error) {
	t, err := h.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: readOnly})
	return sqlTx{t}, err
}

type sqlTx struct{ tx *sql.Tx }

func (t sqlTx) exec(ctx context.Context, q string, args ...any) (int64, error) {
	return rowsAffected(t.tx.ExecContext(ctx, q, args...))
}

func (t sqlTx) queryRow(ctx context.Context, q string, args ...any) scanner {
	return t.tx.QueryRowContext(ctx, q, args...)
}

func (t sqlTx) commit() error   { return t.tx.Commit() }
func (t sqlTx) rollback() error { return t.tx.Rollback() }

func rowsAffected(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// pgxHandle is pgreplicapgx's pool.
type pgxHandle struct{ p *pgreplicapgx.Pool }

func (h pgxHandle) exec(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := h.p.Exec(ctx, q, args...)
	return tag.RowsAffected(), err
}

func (h pgxHandle) queryRow(ctx context.Context, q string, args ...any) scanner {
	return h.p.QueryRow(ctx, q, args...)
}

func (h pgxHandle) begin(ctx context.Context, readOnly bool) (tx, error) {
	opts := pgx.TxOptions{}
	if readOnly {
		opts.AccessMode = pgx.ReadOnly
	}
	t, err := h.p.BeginTx(ctx, opts)
	return pgxTx{ctx: ctx, tx: t}, err
}

// pgxTx keeps the context its transaction began with: pgx ends a
// transaction under a context, database/sql under the one it began with.
type pgxTx struct {
	ctx context.Context
	tx  pgx.Tx
}

func (t pgxTx) exec(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := t.tx.Exec(ctx, q, args...)
	return tag.RowsAffected(), err
}

func (t pgxTx) queryRow(ctx context.Context, q string, args ...any) scanner {
	return t.tx.QueryRow(ctx, q, args...)
}

func (t pgxTx) commit() error   { return t.tx.Commit(t.ctx) }
func (t pgxTx) rollback() error { return t.tx.Rollback(t.ctx) }
