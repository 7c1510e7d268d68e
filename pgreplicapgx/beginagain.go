package pgreplicapgx

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/pgreplica/pgreplica/internal/pgxroute"
	"github.com/pgreplica/pgreplica/internal/sqlstate"
)

// mayBeginAgain reports a transaction that can still begin again: READ
// ONLY below SERIALIZABLE, nothing of it answered yet, not on a
// connection from Acquire.
func (t *tx) mayBeginAgain() bool {
	st := t.st
	return t.outer && st.pool != nil && st.readOnly() && !st.used && !st.ended && !st.pinned
}

// beginAgain begins a read-only transaction again when its first
// statement found the connection lost (a pooler or server restarted
// between BEGIN and it): nothing of the transaction was seen, so it
// begins where BeginTx would route it now, and the statement may be sent
// again on t.Tx. Once a statement answered, a loss is the caller's, as
// in pgx. When it cannot begin again, the transaction is over and
// Rollback returns nil.
func (t *tx) beginAgain(ctx context.Context, err error) bool {
	if !t.mayBeginAgain() || !sqlstate.ConnLost(err) || ctx.Err() != nil {
		return false
	}
	st := t.st
	st.l.Done(err) // the broken connection is closed, not reused
	l, inner, err := st.pool.begin(ctx, st.opts, pgxroute.ReadOnlyTx)
	if err != nil {
		st.ended, st.lost = true, true
		return false
	}
	st.l, t.Tx = l, inner
	return true
}

// firstRows are the rows of a read-only transaction's first query: a
// connection found lost before the first row begins the transaction
// again (beginAgain) and sends the query anew, once.
type firstRows struct {
	pgx.Rows
	t     *tx
	ctx   context.Context
	sql   string
	args  []any
	again bool
}

func (r *firstRows) Next() bool {
	if r.Rows.Next() {
		r.t.st.used = true
		return true
	}
	if err := r.Rows.Err(); err != nil && !r.again && r.t.beginAgain(r.ctx, err) {
		r.again = true
		r.t.note(r.sql)
		r.Rows, _ = r.t.Tx.Query(r.ctx, r.sql, r.args...) // its error is the rows'
		return r.Next()
	}
	r.t.st.used = true
	return false
}

func (r *firstRows) Close() {
	r.t.st.used = true
	r.Rows.Close()
}
