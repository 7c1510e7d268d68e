package pgreplica

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgreplica/pgreplica/internal/pgxroute"
)

// A read through database/sql whose replica is not known to have its
// position carries the replay check in its own flight, as the pgx-native
// handle's reads do, when the inner driver is pgx: one pipeline of the
// check and the query under one Sync. So the read costs the round trip it
// costs pgx's stdlib, and both run in one implicit transaction on one
// backend, which no proxy or transaction pooler splits (the check then
// proves the very server that answers). When the replica turns out
// behind, its rows are dropped unseen and the read goes where the plan
// says (guardedRead). lib/pq cannot pipeline: its reads check first.
//
// The query goes as an unnamed statement, its parameters and result
// formats chosen as stdlib chooses them from the statement's description
// (kept per connection, learnt with one round trip the first time, as
// stdlib's own statement cache does), and its values come out as stdlib's
// (pgxrows.go). With default_query_exec_mode=exec the parameters go as
// text with no description, as pgx sends them then; with simple_protocol
// there is no pipeline, and the read checks first.

// flightQuery is a database/sql query run behind its replay check; rows
// hold its answer once it ran.
type flightQuery struct {
	ctx   context.Context
	query string
	args  []driver.NamedValue
	rows  *pgxRows
}

// flightDescs bounds the statement descriptions a connection keeps for
// reads in flight; they live on the client only, so dropping one costs a
// round trip the next time, nothing on the server.
const flightDescs = 128

// run sends the check and the query on p in one flight and reads up to
// the query's first row. It returns the replay position the check read,
// and pgxroute.ErrBehind, having handed out nothing, when it is below
// need.
func (q *flightQuery) run(p *physical, need LSN) (LSN, error) {
	w, ok := p.wire.(*pgxWire)
	if !ok {
		return 0, errNoFlight
	}
	if err := convertArgs(p.conn, q.args); err != nil {
		return 0, err
	}
	ctx := q.ctx
	sd, err := w.description(ctx, q.query)
	if err != nil {
		if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) {
			// Described before any check: this server may be behind the
			// schema the read needs (a table created since). The read
			// checks first instead, and its own answer tells.
			return 0, errNoFlight
		}
		return 0, badConnIfUnsent(err)
	}
	args := make([]any, len(q.args))
	for i := range q.args {
		args[i] = q.args[i].Value
	}
	var eqb pgx.ExtendedQueryBuilder
	if err := eqb.Build(w.conn.TypeMap(), sd, args); err != nil {
		return 0, err
	}
	var oids []uint32
	var formats []int16
	if sd != nil {
		oids = sd.ParamOIDs
		formats = make([]int16, len(sd.Fields))
		for i := range sd.Fields {
			formats[i] = stdlibResultFormat(sd.Fields[i].DataTypeOID)
		}
	}
	pc := w.conn.PgConn()
	pipe := pc.StartPipeline(ctx)
	pipe.SendQueryParams(replaySQL, nil, nil, nil, nil)
	pipe.SendQueryParams(q.query, eqb.ParamValues, oids, eqb.ParamFormats, formats)
	if err := pipe.Sync(); err != nil {
		pipe.Close()
		return 0, badConnIfUnsent(err)
	}
	replayed, err := readReplay(pipe)
	if err != nil {
		return 0, errors.Join(err, pipe.Close())
	}
	if replayed < need {
		return replayed, errors.Join(pgxroute.ErrBehind, pipe.Close())
	}
	res, err := pipe.GetResults()
	if err != nil {
		w.forget(q.query) // the statement may have changed
		return replayed, errors.Join(err, pipe.Close())
	}
	rr, ok := res.(*pgconn.ResultReader)
	if !ok {
		pipe.Close()
		return replayed, fmt.Errorf("pgreplica: unexpected answer %T to a read in flight", res)
	}
	rows := &pgxRows{rows: pgx.RowsFromResultReader(w.conn.TypeMap(), rr), m: w.conn.TypeMap(),
		done: func() error { return endPipeline(pipe) }}
	rows.more = rows.rows.Next()
	rows.peeked = true
	if err := rows.rows.Err(); err != nil {
		w.forget(q.query)
		rows.Close()
		return replayed, err
	}
	q.rows = rows
	return replayed, nil
}

// errNoFlight: the read cannot go in flight on this connection (not
// pgx's, or its statement could not be described there); it goes the way
// that checks first.
var errNoFlight = errors.New("pgreplica: the read cannot carry its check in its flight here")

// readReplay reads the check's answer, the first result of the pipeline.
func readReplay(pipe *pgconn.Pipeline) (LSN, error) {
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
	return lsnValue(r.Rows[0][0])
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

// badConnIfUnsent reports an error that left nothing sent as
// driver.ErrBadConn, as stdlib does, so database/sql may try again.
func badConnIfUnsent(err error) error {
	if pgconn.SafeToRetry(err) {
		return driver.ErrBadConn
	}
	return err
}

// description returns what pgx's stdlib would know of query before
// sending it: its description (asked once, then kept), or nil with
// default_query_exec_mode=exec, where pgx sends without one.
func (w *pgxWire) description(ctx context.Context, query string) (*pgconn.StatementDescription, error) {
	if w.mode == pgx.QueryExecModeExec {
		return nil, nil
	}
	if sd := w.descs[query]; sd != nil {
		return sd, nil
	}
	sd, err := w.conn.PgConn().Prepare(ctx, "", query, nil)
	if err != nil {
		return nil, err
	}
	if w.descs == nil {
		w.descs = make(map[string]*pgconn.StatementDescription)
	}
	if len(w.descs) >= flightDescs {
		for k := range w.descs { // any one: they cost a round trip to learn again
			delete(w.descs, k)
			break
		}
	}
	w.descs[query] = sd
	return sd, nil
}

// forget drops a description that an error may have made stale (a table
// altered since).
func (w *pgxWire) forget(query string) { delete(w.descs, query) }

// flightsFor reports whether reads through database/sql can carry their
// check in their own flight on connections made from cfg: pgx, with a
// query mode that uses the extended protocol.
func flightsFor(cfg *Config) bool {
	if cfg.Driver == DriverPq {
		return false
	}
	return cfg.Params["default_query_exec_mode"] != "simple_protocol"
}
