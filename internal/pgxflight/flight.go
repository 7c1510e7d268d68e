package pgxflight

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgreplica/pgreplica/internal/pgxroute"
	"github.com/pgreplica/pgreplica/internal/pgxtrace"
	"github.com/pgreplica/pgreplica/internal/probe"
)

// ErrNoFlight: the read cannot go in flight on this connection (not
// pgx's, or its statement could not be described there); it goes the way
// that checks first.
var ErrNoFlight = errors.New("pgreplica: the read cannot carry its check in its flight here")

// Run sends check, a query of one pg_lsn as text, and query with args
// (already converted for conn) on conn in one flight, and reads up to the
// query's first row. It returns the position the check read and the
// query's rows; pgxroute.ErrBehind, having handed out nothing, when the
// position does not meet need (need.Met); ErrNoFlight, having sent nothing, when the
// query could not be described before the check (this server may be
// behind the schema the read needs: the read then checks first, and its
// own answer tells). An error that left nothing sent is
// driver.ErrBadConn, as stdlib reports it. With need.Trace the query is
// traced as stdlib's would be (the check left out), up to the rows'
// Close.
func Run(ctx context.Context, conn *pgx.Conn, descs *Descriptions, check, query string, args []driver.NamedValue, need pgxroute.Need) (uint64, *Rows, error) {
	sd, err := descs.get(ctx, conn, query)
	if err != nil {
		if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) {
			return 0, nil, ErrNoFlight
		}
		return 0, nil, BadConnIfUnsent(err)
	}
	vals := make([]any, len(args))
	for i := range args {
		vals[i] = args[i].Value
	}
	if sd != nil && len(sd.ParamOIDs) != len(vals) {
		return 0, nil, fmt.Errorf("expected %d arguments, got %d", len(sd.ParamOIDs), len(vals)) // pgx's words
	}
	ctx, span := need.Trace.StartQuery(ctx, conn, query, vals)
	replayed, rows, err := run(ctx, conn, descs, check, query, sd, vals, need)
	switch {
	case rows != nil:
		done := rows.done
		rows.done = func() error {
			err := done()
			span.End(rows.rows.CommandTag(), errors.Join(rows.rows.Err(), err))
			return err
		}
	case errors.Is(err, pgxroute.ErrBehind):
		span.End(pgconn.CommandTag{}, errors.Join(pgxtrace.ErrDropped, err))
	default:
		span.End(pgconn.CommandTag{}, err)
	}
	return replayed, rows, err
}

// run is Run once the query is described.
func run(ctx context.Context, conn *pgx.Conn, descs *Descriptions, check, query string, sd *pgconn.StatementDescription, vals []any, need pgxroute.Need) (uint64, *Rows, error) {
	var eqb pgx.ExtendedQueryBuilder
	if err := eqb.Build(conn.TypeMap(), sd, vals); err != nil {
		return 0, nil, err
	}
	var oids []uint32
	var formats []int16
	if sd != nil {
		oids = sd.ParamOIDs
		formats = make([]int16, len(sd.Fields))
		for i := range sd.Fields {
			formats[i] = ResultFormat(sd.Fields[i].DataTypeOID)
		}
	}
	pipe := conn.PgConn().StartPipeline(ctx)
	pipe.SendQueryParams(check, nil, nil, nil, nil)
	pipe.SendQueryParams(query, eqb.ParamValues, oids, eqb.ParamFormats, formats)
	if err := pipe.Sync(); err != nil {
		pipe.Close()
		return 0, nil, BadConnIfUnsent(err)
	}
	replayed, err := readCheck(pipe)
	if err != nil {
		return 0, nil, closeAfter(pipe, err)
	}
	if !need.Met(replayed) {
		return replayed, nil, errors.Join(pgxroute.ErrBehind, pipe.Close())
	}
	res, err := pipe.GetResults()
	if err != nil {
		descs.forget(query) // the statement may have changed
		return replayed, nil, closeAfter(pipe, err)
	}
	rr, ok := res.(*pgconn.ResultReader)
	if !ok {
		pipe.Close()
		return replayed, nil, fmt.Errorf("pgreplica: unexpected answer %T to a read in flight", res)
	}
	rows := &Rows{rows: pgx.RowsFromResultReader(conn.TypeMap(), rr), m: conn.TypeMap(),
		done: func() error { return endPipeline(pipe) }}
	rows.more = rows.rows.Next()
	rows.peeked = true
	if err := rows.rows.Err(); err != nil {
		descs.forget(query)
		rows.Close()
		return replayed, nil, err
	}
	return replayed, rows, nil
}

// readCheck reads the check's answer, the first result of the pipeline.
func readCheck(pipe *pgconn.Pipeline) (uint64, error) {
	res, err := pipe.GetResults()
	if err != nil {
		return 0, err
	}
	rr, ok := res.(*pgconn.ResultReader)
	if !ok {
		return 0, fmt.Errorf("pgreplica: unexpected answer %T to the replay check", res)
	}
	r := rr.Read()
	if r.Err != nil {
		return 0, r.Err
	}
	if len(r.Rows) != 1 || len(r.Rows[0]) != 1 {
		return 0, errors.New("pgreplica: unexpected answer to the replay check")
	}
	return probe.LSN(r.Rows[0][0])
}

// closeAfter ends the pipeline of a read that failed with err and
// returns err alone, as stdlib would have: what Close adds then is an
// echo ("conn closed" after the context ended), and a connection it
// leaves broken is closed, which the pool sees.
func closeAfter(pipe *pgconn.Pipeline, err error) error {
	pipe.Close()
	return err
}

// endPipeline reads the flight's Sync, after the query's rows, and ends
// the pipeline.
func endPipeline(pipe *pgconn.Pipeline) error {
	res, err := pipe.GetResults()
	if err == nil {
		if _, ok := res.(*pgconn.PipelineSync); !ok {
			err = fmt.Errorf("pgreplica: unexpected answer %T after a read in flight", res)
		}
	}
	return errors.Join(err, pipe.Close())
}

// BadConnIfUnsent reports an error that left nothing sent as
// driver.ErrBadConn, as stdlib does, so database/sql may try again.
func BadConnIfUnsent(err error) error {
	if pgconn.SafeToRetry(err) {
		return driver.ErrBadConn
	}
	return err
}

// MaxDescriptions bounds the statement descriptions a connection keeps
// for reads in flight; they live on the client only, so dropping one
// costs a round trip the next time, nothing on the server.
const MaxDescriptions = 128

// Descriptions are what pgx's stdlib would know of a connection's
// queries before sending them: each one's description, asked once (one
// round trip), then kept, as stdlib's own statement cache does. With
// Mode pgx.QueryExecModeExec, where pgx sends without one, there are
// none. Only the borrower of the connection touches them: no lock.
type Descriptions struct {
	// Mode is the connection's default_query_exec_mode.
	Mode pgx.QueryExecMode
	m    map[string]*pgconn.StatementDescription
}

// get returns query's description on conn: the one kept, or one asked
// with an unnamed Parse/Describe/Sync and kept; nil in exec mode.
func (d *Descriptions) get(ctx context.Context, conn *pgx.Conn, query string) (*pgconn.StatementDescription, error) {
	if d.Mode == pgx.QueryExecModeExec {
		return nil, nil
	}
	if sd := d.m[query]; sd != nil {
		return sd, nil
	}
	sd, err := conn.PgConn().Prepare(ctx, "", query, nil)
	if err != nil {
		return nil, err
	}
	d.keep(query, sd)
	return sd, nil
}

// keep keeps sd as query's description, dropping any other one when
// MaxDescriptions are kept.
func (d *Descriptions) keep(query string, sd *pgconn.StatementDescription) {
	if d.m == nil {
		d.m = make(map[string]*pgconn.StatementDescription)
	}
	if len(d.m) >= MaxDescriptions {
		for k := range d.m { // any one: they cost a round trip to learn again
			delete(d.m, k)
			break
		}
	}
	d.m[query] = sd
}

// forget drops a description that an error may have made stale (a table
// altered since).
func (d *Descriptions) forget(query string) { delete(d.m, query) }
