package pgreplica

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgreplica/pgreplica/internal/pgxroute"
	"github.com/pgreplica/pgreplica/internal/stmtclass"
)

// Reads with their replay check in their own flight, for both front
// doors (guardedRead): a read whose replica is not known to have its
// position sends the check and the query as one pipeline under one Sync
// when the inner driver is pgx (the pgx-native handle's operations do
// this themselves; a database/sql query does it here, flightQuery). So the read costs the round trip it
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

// guardedRead serves a read that needs a position no replica is known to
// have (the monitor's last look is older than the write) in one round
// trip: the query goes to a replica the lag bounds allow, in the same
// flight as a check of its replay position (guarded). It is the handle's
// way, as pgx can pipeline; the driver checks first (awaitReplica). ok is false when
// that is not possible or the replica was behind: the caller then routes
// as the driver does (wait for a replica, or fall back), having lost no
// more than that one round trip.
func (c *Connector) guardedRead(ctx context.Context, pl *plan, cls stmtclass.Class, query string,
	guarded pgxroute.GuardedOp, fq *flightQuery) (l lease, ok bool, err error) {
	if !pl.unproven() || pl.conflicted {
		return lease{}, false, nil
	}
	if futile, _ := c.futile(ctx, pl); futile {
		return lease{}, false, nil // route looks once, or falls back
	}
	l, need, ok := c.leaseUnproven(ctx, pl)
	if !ok {
		return lease{}, false, ctx.Err()
	}
	p := l.p
	p.note(cls)
	want := pgxroute.Need{At: uint64(need)}
	if pl.later != nil {
		want.Later = pl.later
	}
	var replayed uint64
	if fq != nil {
		var r LSN
		r, err = fq.run(p, want)
		replayed = uint64(r)
	} else {
		replayed, err = guarded.RunGuarded(pgxConnOf(p), want)
	}
	if errors.Is(err, errNoFlight) {
		l.release(nil)
		return lease{}, false, nil
	}
	c.metrics.flightChecks.Add(1)
	if replayed != 0 {
		p.node.observeOn(p.srv, LSN(replayed))
	}
	switch {
	case err == nil:
		l.known = max(l.known, LSN(replayed))
		if pl.later != nil {
			c.settleLater(ctx, pl) // read: the flight's check waited for it
		}
		if pl.tokened() {
			c.metrics.tokenedReads.Add(1)
			c.metrics.wait.Observe(pl.waited())
		}
		l.observeAnswer()
		c.noteServed(ctx, pl, &l)
		return l, true, nil
	case errors.Is(err, pgxroute.ErrBehind):
		l.release(notIdle(p, nil))
		return lease{}, false, nil
	}
	l.release(notIdle(p, err))
	if c.retry(ctx, pl, &l, err, query) {
		return lease{}, false, nil // route sends it where retry said
	}
	return lease{}, false, err
}

// leaseUnproven borrows a connection for a guarded read and says what its
// guard must check. A session read stays on the replica of its last read
// when it can, on a connection older than that read (see leaseAffine: it
// then cannot see less than that read did); one that leaves it must also
// reach what that read saw, when that bound is known, and otherwise
// routes as the driver does. Any other read takes a replica the lag
// bounds allow.
func (c *Connector) leaseUnproven(ctx context.Context, pl *plan) (l lease, need LSN, ok bool) {
	need = pl.need
	if pl.prefer != nil {
		if l, ok := c.leaseAffine(ctx, pl, false); ok {
			return l, need, true
		}
		if !pl.lastReadBoundKnown {
			return lease{}, 0, false
		}
		need = max(need, pl.lastReadBound)
	}
	set := pl.replicas(false)
	if set == 0 {
		return lease{}, 0, false
	}
	n := pl.topo.nodes[c.choose(pl.topo, set)].n
	pingLimit := n.pool.pingTimeout
	if c.settings.hedgeDelay > 0 && set.len() > 1 {
		pingLimit = n.answers.hedgeDelay(c.settings.hedgeDelay) // as acquireReplica
	}
	// An idle connection first, the chosen replica's or another's: a
	// borrow that gives up on a connection being made leaves it to the
	// pool (acquireReplica's bound), which under load filled every pool
	// with connections no read needed. Only when no replica the read may
	// use has one idle does it wait for one.
	if res, ok := n.pool.tryAcquire(ctx, pingLimit); ok {
		return c.newLease(res, true, false), max(need, c.needOn(pl, n)), true
	}
	for rest := set; rest != 0; rest &= rest - 1 {
		if o := pl.topo.nodes[rest.nth(0)].n; o != n {
			if res, ok := o.pool.tryAcquire(ctx, pingLimit); ok {
				return c.newLease(res, true, false), max(need, c.needOn(pl, o)), true
			}
		}
	}
	res, err := c.acquireReplica(ctx, n, set.len() > 1)
	if err != nil {
		pl.tried.add(n.idx)
		return lease{}, 0, false
	}
	return c.newLease(res, true, false), max(need, c.needOn(pl, n)), true
}

// flightDescs bounds the statement descriptions a connection keeps for
// reads in flight; they live on the client only, so dropping one costs a
// round trip the next time, nothing on the server.
const flightDescs = 128

// run sends the check and the query on p in one flight and reads up to
// the query's first row. It returns the replay position the check read,
// and pgxroute.ErrBehind, having handed out nothing, when it does not
// meet need.
func (q *flightQuery) run(p *physical, need pgxroute.Need) (LSN, error) {
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
	if sd != nil && len(sd.ParamOIDs) != len(args) {
		return 0, fmt.Errorf("expected %d arguments, got %d", len(sd.ParamOIDs), len(args)) // pgx's words
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
	if !need.Met(uint64(replayed)) {
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

// flightsFor reports whether reads through database/sql can carry their
// check in their own flight on connections made from cfg: pgx, with a
// query mode that uses the extended protocol.
func flightsFor(cfg *Config) bool {
	if cfg.Driver == DriverPq {
		return false
	}
	return cfg.Params["default_query_exec_mode"] != "simple_protocol"
}
