package pgreplica

import (
	"context"
	"database/sql/driver"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// pgxWire is the wire of a pgx stdlib connection: it reaches the protocol
// underneath database/sql, so the read of a write's LSN rides in the
// write's own flight.
type pgxWire struct {
	conn *pgx.Conn
	// prepared holds the statements pgreplica prepared on this connection
	// for pipelined writes.
	prepared map[string]*pgconn.StatementDescription
}

// execCapture sends [write, Sync, LSN query, Sync] in one flight: the LSN
// query runs in its own implicit transaction, after the write's commit.
// Statements it cannot pipeline (several statements in one string, or a
// parameterless utility statement, which pgx runs with the simple
// protocol) take the generic path.
func (w *pgxWire) execCapture(ctx context.Context, p *physical, query string, cls stmtClass, args []driver.NamedValue, lsnQuery string) (driver.Result, LSN, error) {
	if cls.multi || len(args) == 0 && !cls.dml {
		return genericWire{}.execCapture(ctx, p, query, cls, args, lsnQuery)
	}
	sd, err := w.statement(ctx, query)
	if err != nil {
		return nil, 0, err
	}
	vals := make([]any, len(args))
	for i := range args {
		vals[i] = args[i].Value
	}
	var eqb pgx.ExtendedQueryBuilder
	if err := eqb.Build(w.conn.TypeMap(), sd, vals); err != nil {
		return nil, 0, err
	}
	pl := w.conn.PgConn().StartPipeline(ctx)
	pl.SendQueryStatement(sd, eqb.ParamValues, eqb.ParamFormats, eqb.ResultFormats)
	pl.SendPipelineSync()
	pl.SendQueryParams(lsnQuery, nil, nil, nil, nil)
	if err := pl.Sync(); err != nil {
		pl.Close()
		return nil, 0, err
	}

	var tag pgconn.CommandTag
	var lsn LSN
	var firstErr error
	keep := func(err error) {
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	readers := 0
	for {
		res, err := pl.GetResults()
		if err != nil {
			keep(err)
			if pgconn.SafeToRetry(err) || w.conn.PgConn().IsClosed() {
				break
			}
			continue
		}
		if res == nil {
			break
		}
		r, ok := res.(*pgconn.ResultReader)
		if !ok {
			continue // a PipelineSync
		}
		readers++
		if readers == 1 {
			tag, err = r.Close()
			keep(err)
			continue
		}
		for r.NextRow() {
			if v := r.Values(); len(v) == 1 && firstErr == nil {
				lsn, err = ParseLSN(string(v[0]))
				keep(err)
			}
		}
		_, err = r.Close()
		keep(err)
	}
	keep(pl.Close())
	if firstErr != nil {
		return nil, 0, firstErr
	}
	return driver.RowsAffected(tag.RowsAffected()), lsn, nil
}

// commitCapture sends "COMMIT; SELECT …" as one simple query: the server
// runs the SELECT after the commit completed, in the same round trip.
func (w *pgxWire) commitCapture(ctx context.Context, _ *physical, _ driver.Tx, lsnQuery string) (LSN, error) {
	results, err := w.conn.PgConn().Exec(ctx, "COMMIT; "+lsnQuery).ReadAll()
	if err != nil {
		return 0, err
	}
	if len(results) != 2 || results[0].CommandTag.String() != "COMMIT" {
		// An aborted transaction answers COMMIT with ROLLBACK.
		return 0, errCommitRolledBack
	}
	if len(results[1].Rows) != 1 || len(results[1].Rows[0]) != 1 {
		return 0, errors.New("pgreplica: unexpected answer reading the commit LSN")
	}
	return ParseLSN(string(results[1].Rows[0][0]))
}

// badConnMaySend is false: pgx returns ErrBadConn only when nothing was
// sent.
func (*pgxWire) badConnMaySend() bool { return false }

// describe sends an unnamed Parse/Describe/Sync: one round trip and
// nothing to deallocate (pgx's own Prepare would name the statement after
// its text and cost a Deallocate at Close).
func (w *pgxWire) describe(ctx context.Context, _ *physical, query string) (int, error) {
	if w.conn.IsClosed() {
		return 0, driver.ErrBadConn // as stdlib's PrepareContext
	}
	sd, err := w.conn.PgConn().Prepare(ctx, "", query, nil)
	if err != nil {
		return 0, err
	}
	return len(sd.ParamOIDs), nil
}

func (w *pgxWire) forget(query string) { delete(w.prepared, query) }

// maxPrepared bounds the statements pgreplica prepares per connection for
// pipelined writes; past it they are deallocated and the cache restarts.
const maxPrepared = 256

// statement prepares query once per connection (pgx keeps the
// description), so a pipelined write costs one round trip like pgx's own
// statement cache.
func (w *pgxWire) statement(ctx context.Context, query string) (*pgconn.StatementDescription, error) {
	if sd, ok := w.prepared[query]; ok {
		return sd, nil
	}
	if len(w.prepared) >= maxPrepared {
		for q := range w.prepared {
			if err := w.conn.Deallocate(ctx, q); err != nil {
				return nil, err
			}
		}
		clear(w.prepared)
	}
	sd, err := w.conn.Prepare(ctx, query, query)
	if err != nil {
		return nil, err
	}
	if w.prepared == nil {
		w.prepared = make(map[string]*pgconn.StatementDescription)
	}
	w.prepared[query] = sd
	return sd, nil
}
