package pgreplicapgx

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/internal/pgxroute"
)

// rows are the rows of a routed query. start reads up to the first row
// inside the routed operation, so that an error the server sends before
// any row (a replay conflict on a replica, a statement a replica refused
// as a write, a lost connection) lets the router send the query again
// elsewhere, as the driver does; the first row arrives in the same flight
// as the query's other replies, so this costs no round trip. Closing the
// rows, or reading them to the end, gives the connection back (the
// lease's Done, or done). The rows of a routed query are also the
// operation the router runs (Run, RunGuarded): routing a read allocates
// no closure.
type rows struct {
	pgx.Rows
	// The query, for Run and RunGuarded.
	ctx  context.Context
	sql  string
	args []any
	// peeked: the inner rows stand on a first row Next has not handed
	// out yet.
	peeked bool
	closed bool
	// batch carries a guarded query (startGuarded); closed with the rows.
	batch pgx.BatchResults
	lease pgxroute.Lease // a routed query's; else done
	done  func(error)
}

// Run runs the query on c and reads to its first row (pgxroute.Op).
func (r *rows) Run(c *pgx.Conn) error { return r.start(r.ctx, c, r.sql, r.args) }

// Clone is a fresh copy of the query, for a hedge (pgxroute.HedgeOp).
func (r *rows) Clone() pgxroute.HedgeOp { return &rows{ctx: r.ctx, sql: r.sql, args: r.args} }

// Adopt takes over the results of a copy that answered first.
func (r *rows) Adopt(winner pgxroute.HedgeOp) {
	w := winner.(*rows)
	r.Rows, r.peeked, r.batch = w.Rows, w.peeked, w.batch
}

// Discard drops the results of an attempt that lost: its connection is
// closed, not given back.
func (r *rows) Discard() {
	if r.Rows != nil {
		r.Rows.Close()
	}
	if r.batch != nil {
		r.batch.Close()
	}
	r.Rows, r.peeked, r.batch = nil, false, nil
}

// RunGuarded is startGuarded (pgxroute.GuardedOp).
func (r *rows) RunGuarded(c *pgx.Conn, need pgxroute.Need) (uint64, error) {
	return r.startGuarded(r.ctx, c, r.sql, r.args, need)
}

// start runs the query on c and reads to its first row.
func (r *rows) start(ctx context.Context, c *pgx.Conn, sql string, args []any) error {
	inner, err := c.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	return r.peek(inner)
}

// replaySQL reads a replica's replay position.
const replaySQL = "SELECT pg_last_wal_replay_lsn()::text"

// startGuarded runs the query on c in one flight behind a read of the
// replica's replay position, and reads to its first row; when the
// replica has not replayed need, it closes everything and reports
// pgxroute.ErrBehind (the query ran on the replica, read-only, and its
// rows are dropped).
func (r *rows) startGuarded(ctx context.Context, c *pgx.Conn, sql string, args []any, need pgxroute.Need) (uint64, error) {
	b := &pgx.Batch{}
	b.Queue(replaySQL)
	b.Queue(sql, args...)
	ctx, flight := need.Trace.Flight(ctx, nil) // traced as the query alone
	br := c.SendBatch(ctx, b)
	var replayed pgreplica.LSN
	if err := br.QueryRow().Scan(&replayed); err != nil {
		br.Close()
		return 0, err
	}
	if !need.Met(uint64(replayed)) {
		flight.Drop(pgxroute.ErrBehind)
		return uint64(replayed), errors.Join(pgxroute.ErrBehind, br.Close())
	}
	inner, err := br.Query()
	if err != nil {
		br.Close()
		return uint64(replayed), err
	}
	r.batch = br
	if err := r.peek(inner); err != nil {
		br.Close()
		return uint64(replayed), err
	}
	return uint64(replayed), nil
}

// peek reads inner up to its first row.
func (r *rows) peek(inner pgx.Rows) error {
	if inner.Next() {
		r.Rows, r.peeked = inner, true
		return nil
	}
	inner.Close()
	if err := inner.Err(); err != nil {
		return err
	}
	r.Rows = inner
	if r.batch != nil {
		return r.batch.Close()
	}
	return nil
}

func (r *rows) Next() bool {
	if r.peeked {
		r.peeked = false
		return true
	}
	if r.closed {
		return false
	}
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

// Close closes the rows and gives the connection back; what the routing
// decision asks after the results (recording a write, bounding a session
// read) happens then, when the rows ended without error.
func (r *rows) Close() {
	if r.closed {
		return
	}
	r.closed, r.peeked = true, false
	r.Rows.Close()
	err := r.Rows.Err()
	if r.batch != nil {
		err = errors.Join(err, r.batch.Close())
	}
	r.ctx, r.args = nil, nil
	if r.lease.Valid() {
		r.lease.Done(err)
		return
	}
	r.done(err)
}

// row is QueryRow's result, as pgx's: Scan reads the first row and
// closes the rows. It is the rows themselves, under another method set.
type row rows

func (r *row) Scan(dest ...any) error {
	rs := (*rows)(r)
	defer rs.Close()
	if !rs.Next() {
		if err := rs.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := rs.Scan(dest...); err != nil {
		return err
	}
	rs.Close()
	return rs.Err()
}

// errRow is the row of a query that failed before it ran.
type errRow struct{ err error }

func (e errRow) Scan(...any) error { return e.err }

// errRows are the rows of a query that failed before it ran, as pgx
// returns them: every method is safe and Err reports the error.
type errRows struct{ err error }

func (errRows) Close()                                       {}
func (e errRows) Err() error                                 { return e.err }
func (errRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (errRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (errRows) Next() bool                                   { return false }
func (e errRows) Scan(...any) error                          { return e.err }
func (e errRows) Values() ([]any, error)                     { return nil, e.err }
func (errRows) RawValues() [][]byte                          { return nil }
func (errRows) Conn() *pgx.Conn                              { return nil }
func (errRows) TypeMap() *pgtype.Map                         { return nil }

var (
	_ pgx.Rows = (*rows)(nil)
	_ pgx.Rows = errRows{}
	_ pgx.Row  = (*row)(nil)
	_ pgx.Row  = errRow{}

	_ pgxroute.GuardedOp = (*rows)(nil)
	_ pgxroute.HedgeOp   = (*rows)(nil)
)
