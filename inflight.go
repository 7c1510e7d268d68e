package pgreplica

import (
	"context"
	"database/sql/driver"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/pgreplica/pgreplica/internal/inner"
	"github.com/pgreplica/pgreplica/internal/pgxflight"
	"github.com/pgreplica/pgreplica/internal/pgxroute"
	"github.com/pgreplica/pgreplica/internal/stmtclass"
)

// A read with its replay check in its own flight: where pgx can pipeline,
// a read that needs a position no replica is known to have goes to a
// replica with the check in the same round trip (guardedRead), instead of
// asking first.

// flightQuery is a database/sql query run behind its replay check; rows
// hold its answer once it ran.
type flightQuery struct {
	ctx   context.Context
	query string
	args  []driver.NamedValue
	rows  *pgxflight.Rows
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
	l, need, err := c.leaseUnproven(ctx, pl)
	if err != nil {
		if ctx.Err() != nil {
			return lease{}, false, withContextErr(ctx, err)
		}
		return lease{}, false, nil // route as the driver does
	}
	p := l.p
	p.note(cls)
	want := pgxroute.Need{At: uint64(need)}
	if w, ok := p.wire.(*pgxWire); ok {
		want.Trace = w.tracer
	}
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
	if errors.Is(err, pgxflight.ErrNoFlight) {
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
		pl.flightsBehind++
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
// bounds allow. The error says why there is no lease: errNoFlightLease,
// or the borrow's.
func (c *Connector) leaseUnproven(ctx context.Context, pl *plan) (l lease, need LSN, err error) {
	need = pl.need
	if pl.prefer != nil {
		if l, ok := c.leaseAffine(ctx, pl, false); ok {
			return l, need, nil
		}
		if !pl.lastReadBoundKnown {
			return lease{}, 0, errNoFlightLease
		}
		need = max(need, pl.lastReadBound)
	}
	set := pl.replicas(false)
	if set == 0 {
		return lease{}, 0, errNoFlightLease
	}
	n := pl.topo.nodes[c.choose(pl.topo, set)].n
	pingLimit := n.pool.pingTimeout
	if c.settings.hedgeDelay > 0 && set.len() > 1 {
		pingLimit = n.answers.HedgeDelay(c.settings.hedgeDelay) // as acquireReplica
	}
	// An idle connection first, the chosen replica's or another's: a
	// borrow that gives up on a connection being made leaves it to the
	// pool (acquireReplica's bound), which under load filled every pool
	// with connections no read needed. Only when no replica the read may
	// use has one idle does it wait for one.
	if res, ok := n.pool.tryAcquire(ctx, pingLimit); ok {
		return c.newLease(res, true, false), max(need, c.needOn(pl, n)), nil
	}
	for rest := set; rest != 0; rest &= rest - 1 {
		if o := pl.topo.nodes[rest.nth(0)].n; o != n {
			if res, ok := o.pool.tryAcquire(ctx, pingLimit); ok {
				return c.newLease(res, true, false), max(need, c.needOn(pl, o)), nil
			}
		}
	}
	res, err := c.acquireReplica(ctx, n, set.len() > 1)
	if err != nil {
		pl.tried.add(n.idx)
		return lease{}, 0, err
	}
	return c.newLease(res, true, false), max(need, c.needOn(pl, n)), nil
}

// errNoFlightLease: no connection a read in flight may use (leaseUnproven).
var errNoFlightLease = errors.New("pgreplica: no replica connection for a read with its check in flight")

// run sends the check and the query on p in one flight and reads up to
// the query's first row (pgxflight.Run). It returns the replay position
// the check read, and pgxroute.ErrBehind, having handed out nothing, when
// it does not meet need.
func (q *flightQuery) run(p *physical, need pgxroute.Need) (LSN, error) {
	w, ok := p.wire.(*pgxWire)
	if !ok || w.descs.Mode == pgx.QueryExecModeSimpleProtocol {
		return 0, pgxflight.ErrNoFlight // BeforeConnect may have chosen it (flightsFor)
	}
	if err := inner.ConvertArgs(p.conn, q.args); err != nil {
		return 0, err
	}
	replayed, rows, err := pgxflight.Run(q.ctx, w.conn, &w.descs, replaySQL, q.query, q.args, need)
	q.rows = rows
	return LSN(replayed), err
}

// flightsFor reports whether reads through database/sql can carry their
// check in their own flight on connections made from cfg: pgx, with a
// query mode that uses the extended protocol.
func flightsFor(cfg *Config) bool {
	if cfg.Driver == DriverPq {
		return false
	}
	if cfg.Pgx != nil && cfg.Pgx.ConnConfig != nil {
		return cfg.Pgx.ConnConfig.DefaultQueryExecMode != pgx.QueryExecModeSimpleProtocol
	}
	return cfg.Params["default_query_exec_mode"] != "simple_protocol"
}

// readInFlight runs st with its replay check in its own flight
// (guardedRead); the database/sql door's query leaves its rows in st.
func (c *Connector) readInFlight(ctx context.Context, pl *plan, st *statement) (lease, bool, error) {
	if st.guard != nil {
		return c.guardedRead(ctx, pl, st.cls, st.query, st.guard, nil)
	}
	fq := flightQuery{ctx: ctx, query: st.query, args: st.args}
	l, ok, err := c.guardedRead(ctx, pl, st.cls, st.query, nil, &fq)
	if ok {
		st.rows = fq.rows
	}
	return l, ok, err
}
