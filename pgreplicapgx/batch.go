package pgreplicapgx

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/internal/pgxroute"
)

// SendBatch sends every statement of b in one flight, as pgx does: to one
// replica when each is a provable read, else to the primary, where a
// batch that writes is recorded once, when its results are closed (pgx
// runs a batch in one implicit transaction). The connection goes back on
// Close. A batch that begins a transaction (pgx.Batch.BeginTx) runs on
// the primary; its transaction, from the results' Tx, holds the
// connection until it ends, as with pgxpool.
func (p *Pool) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	req := pgxroute.Request{Kind: pgxroute.Batch, Batch: make([]string, len(b.QueuedQueries))}
	for i, q := range b.QueuedQueries {
		req.Batch[i] = q.SQL
	}
	if len(req.Batch) > 0 && beginsTx(req.Batch[0]) {
		req.Kind = pgxroute.TxBatch
	}
	op := &batchOp{ctx: ctx, b: b}
	req.Guarded = op
	l, err := p.routeOp(ctx, req, op)
	if err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	inner := op.inner
	br := &batchResults{BatchResults: inner, done: l.Done}
	if req.Kind == pgxroute.TxBatch {
		br.tx = batchTx(inner, l, req.Batch[1:], false)
	}
	return br
}

// batchOp sends a batch on the connection the router chose
// (pgxroute.GuardedOp; the router guards only a batch of reads).
type batchOp struct {
	ctx   context.Context
	b     *pgx.Batch
	inner pgx.BatchResults
}

func (o *batchOp) Run(c *pgx.Conn) error {
	o.inner = c.SendBatch(o.ctx, o.b)
	return nil
}

// RunGuarded sends the batch behind a read of the replica's replay
// position, in one flight, and reads that position; when it is below
// need it reads the batch's results to their end without handing them to
// anyone (the statements' callbacks do not run), closes them and reports
// pgxroute.ErrBehind. Otherwise the caller reads the batch's own results
// as if it had been sent alone.
func (o *batchOp) RunGuarded(c *pgx.Conn, need pgxroute.Need) (uint64, error) {
	// Copies of the caller's queued queries: pgx records in each the
	// statement it prepared on this connection, and a batch sent again
	// elsewhere (this replica was behind) must not carry that.
	g := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(o.b.QueuedQueries)+1)}
	g.Queue(replaySQL)
	for _, q := range o.b.QueuedQueries {
		g.QueuedQueries = append(g.QueuedQueries, &pgx.QueuedQuery{SQL: q.SQL, Arguments: q.Arguments, Fn: q.Fn})
	}
	ctx, flight := need.Trace.Flight(o.ctx, o.b) // traced as the caller's batch
	br := c.SendBatch(ctx, g)
	var replayed pgreplica.LSN
	if err := br.QueryRow().Scan(&replayed); err != nil {
		br.Close()
		return 0, err
	}
	if !need.Met(uint64(replayed)) {
		flight.Drop(pgxroute.ErrBehind)
		for range o.b.QueuedQueries {
			if _, err := br.Exec(); err != nil {
				break
			}
		}
		return uint64(replayed), errors.Join(pgxroute.ErrBehind, br.Close())
	}
	o.inner = br
	return uint64(replayed), nil
}

// beginsTx reports whether a batch's first statement is the BEGIN that
// pgx.Batch.BeginTx queues (pgx renders it as "begin ..."; a custom
// TxOptions.BeginQuery says begin or start transaction too).
func beginsTx(sql string) bool {
	sql = strings.TrimSpace(sql)
	for _, w := range []string{"begin", "start"} {
		if len(sql) >= len(w) && strings.EqualFold(sql[:len(w)], w) && (len(sql) == len(w) || !isWordByte(sql[len(w)])) {
			return true
		}
	}
	return false
}

func isWordByte(b byte) bool {
	return b == '_' || '0' <= b && b <= '9' || 'a' <= b|0x20 && b|0x20 <= 'z'
}

// batchTx wraps the transaction a batch began, on lease l; sqls are the
// batch's statements after BEGIN.
func batchTx(inner pgx.BatchResults, l pgxroute.Lease, sqls []string, pinned bool) *tx {
	t := &tx{Tx: inner.Tx(), st: &txState{l: l, pinned: pinned}, outer: true}
	for _, q := range sqls {
		t.note(q)
	}
	return t
}

// batchResults close the inner results, then run done with their error,
// unless the batch began a transaction that is still open: then the
// transaction's end gives the connection back.
type batchResults struct {
	pgx.BatchResults
	tx     *tx
	closed bool
	done   func(error)
}

func (r *batchResults) Close() error {
	if r.closed {
		return r.BatchResults.Close()
	}
	r.closed = true
	err := r.BatchResults.Close()
	if r.tx != nil {
		if r.tx.st.l.Conn().PgConn().TxStatus() != 'I' {
			return err // the transaction holds the connection
		}
		r.tx.st.ended = true // BEGIN failed or the batch never ran
		if r.tx.st.pinned {
			return err
		}
	}
	r.done(err)
	return err
}

// Tx returns the transaction the batch began, or nil.
func (r *batchResults) Tx() pgx.Tx {
	if r.tx == nil {
		return nil
	}
	return r.tx
}

var _ pgx.BatchResults = (*batchResults)(nil)
