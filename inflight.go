package pgreplica

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgreplica/pgreplica/internal/inner"
	"github.com/pgreplica/pgreplica/internal/monoclock"
	"github.com/pgreplica/pgreplica/internal/pgxflight"
	"github.com/pgreplica/pgreplica/internal/pgxroute"
)

// A read with its replay check in its own flight: where pgx can pipeline,
// a read that needs a position no replica is known to have goes to a
// replica with the check in the same round trip, instead of asking
// first. acquire borrows for it (leaseInFlight), route runs it
// (runInFlight) as its third way, beside plain and hedged.

// leaseInFlight borrows a replica's connection for a read that needs a
// position no replica is known to have (the monitor's last look is older
// than the write), to carry its check in its own flight: a replica the
// lag bounds allow. check is what the check must find replayed; 0 when
// the read cannot fly (no replica is predicted to replay its position in
// time, or none gave a connection): acquire then goes on as the driver
// does (wait for a replica, or fall back), having lost nothing. It is the
// way of the pgx inner driver, which can pipeline; lib/pq checks first
// (awaitReplica).
func (r *router) leaseInFlight(ctx context.Context, pl *plan) (l lease, check LSN, err error) {
	if futile, _ := r.futile(ctx, pl); futile {
		return lease{}, 0, nil // acquire looks once, or falls back
	}
	l, check, err = r.leaseUnproven(ctx, pl)
	if err != nil {
		if ctx.Err() != nil {
			return lease{}, 0, withContextErr(ctx, err)
		}
		return lease{}, 0, nil // as the driver does
	}
	return l, check, nil
}

// runInFlight runs st on l, the connection leaseInFlight borrowed, in
// one flight with a check that its server has replayed check (guarded):
// the pgx handle's operation (st.guard), which holds its results, or the
// database/sql door's query, which leaves its rows in st. back reports a
// read that did not run and may go elsewhere at no more than that one
// round trip's cost: no flight was possible on the connection, or the
// check found the replica behind (pl.flightsBehind counts those); route
// then goes back to acquire's decision. l is given back then, and when
// the read failed (err).
func (r *router) runInFlight(ctx context.Context, pl *plan, l *lease, st *statement, check LSN) (back bool, err error) {
	p := l.p
	p.note(st.cls)
	want := pgxroute.Need{At: uint64(check)}
	if w, ok := p.wire.(*pgxWire); ok {
		want.Trace = w.tracer
	}
	if pl.later != nil {
		want.Later = pl.later
	}
	var replayed uint64
	sent := time.Now()
	if st.guard != nil {
		replayed, err = st.guard.RunGuarded(pgxConnOf(p.conn), want)
	} else {
		replayed, err = flyQuery(ctx, p, st, want)
	}
	if errors.Is(err, pgxflight.ErrNoFlight) {
		l.release(nil)
		return true, nil
	}
	r.metrics.flightChecks.Add(1)
	if replayed != 0 {
		p.node.observeOn(p.srv, LSN(replayed))
	}
	if !pl.pendingWriteAt.IsZero() {
		// The check was for a write of known age: learn from it.
		switch age := sent.Sub(pl.pendingWriteAt); {
		case err == nil:
			p.node.flights.shown(age, monoclock.Of(sent))
		case errors.Is(err, pgxroute.ErrBehind):
			p.node.flights.behind(age, p.node.rttEWMA(), monoclock.Of(sent))
		}
	}
	switch {
	case err == nil:
		l.known = max(l.known, LSN(replayed))
		if pl.later != nil {
			r.settleLater(ctx, pl) // read: the flight's check waited for it
		}
		return false, nil
	case errors.Is(err, pgxroute.ErrBehind):
		pl.flightsBehind++
		l.release(notIdle(p.conn, nil))
		return true, nil
	}
	l.release(notIdle(p.conn, err))
	return false, err
}

// leaseUnproven borrows a connection for a guarded read and says what its
// guard must check. A session read stays on the replica of its last read
// when it can, on a connection older than that read (see leaseAffine: it
// then cannot see less than that read did); one that leaves it must also
// reach what that read saw, when that bound is known, and otherwise
// routes as the driver does. Any other read takes a replica the lag
// bounds allow. The error says why there is no lease: errNoFlightLease,
// or the borrow's.
func (r *router) leaseUnproven(ctx context.Context, pl *plan) (l lease, need LSN, err error) {
	need = pl.need
	if pl.prefer != nil {
		if l, ok := r.leaseAffine(ctx, pl, false); ok {
			return l, need, nil
		}
		if !pl.lastReadBoundKnown {
			return lease{}, 0, errNoFlightLease
		}
		need = max(need, pl.lastReadBound)
	}
	set := pl.withoutLate(pl.replicas(false), time.Now())
	if set == 0 {
		return lease{}, 0, errNoFlightLease
	}
	n := pl.topo.nodes[r.choose(pl.topo, set)].n
	pingLimit, _ := r.pingLimit(n, set.len() > 1)
	// An idle connection first, the chosen replica's or another's: a
	// borrow that gives up on a connection being made leaves it to the
	// pool (acquireReplica's bound), which under load filled every pool
	// with connections no read needed. Only when no replica the read may
	// use has one idle does it wait for one.
	if res, ok := n.pool.tryAcquire(ctx, pingLimit); ok {
		return r.newLease(res, true, false), max(need, r.needOn(pl, n)), nil
	}
	for rest := set; rest != 0; rest &= rest - 1 {
		if o := pl.topo.nodes[rest.nth(0)].n; o != n {
			if res, ok := o.pool.tryAcquire(ctx, pingLimit); ok {
				return r.newLease(res, true, false), max(need, r.needOn(pl, o)), nil
			}
		}
	}
	// Any other replica that may serve the read counts, late or not: a
	// read whose borrow here fails goes back to acquire's decision.
	res, err := r.acquireReplica(ctx, n, pl.replicas(false).len() > 1)
	if err != nil {
		pl.tried.add(n.idx)
		return lease{}, 0, err
	}
	return r.newLease(res, true, false), max(need, r.needOn(pl, n)), nil
}

// errNoFlightLease: no connection a read in flight may use (leaseUnproven).
var errNoFlightLease = errors.New("pgreplica: no replica connection for a read with its check in flight")

// flyQuery sends the check and st's query on p in one flight and reads up
// to the query's first row (pgxflight.Run), leaving its rows in st. It
// returns the replay position the check read, and pgxroute.ErrBehind,
// having handed out nothing, when it does not meet need.
func flyQuery(ctx context.Context, p *physical, st *statement, need pgxroute.Need) (uint64, error) {
	w, ok := p.wire.(*pgxWire)
	if !ok || w.descs.Mode == pgx.QueryExecModeSimpleProtocol {
		return 0, pgxflight.ErrNoFlight // BeforeConnect may have chosen it (flightsFor)
	}
	if err := inner.ConvertArgs(p.conn, st.args); err != nil {
		return 0, err
	}
	replayed, rows, err := pgxflight.Run(ctx, w.conn, &w.descs, replaySQL, st.query, st.args, need)
	if err == nil {
		st.rows = rows
	}
	return replayed, err
}
