package pgreplica

import (
	"context"
	"database/sql/driver"
	"errors"
	"time"

	"github.com/pgreplica/pgreplica/internal/pgxflight"
	"github.com/pgreplica/pgreplica/internal/pgxroute"
	"github.com/pgreplica/pgreplica/internal/sqlstate"
	"github.com/pgreplica/pgreplica/internal/stmtclass"
)

// A read's replay check: the statement that proves the read's replica has
// replayed the read's position, on the server that answers it. The check
// goes before the read (checkReplay), inside a read-only transaction of
// its own on a node behind a pooler, or in the read's own flight
// (guardedRead).

// Behind a transaction pooler (PgBouncer in transaction mode) every
// transaction may run on another backend, and in front of an endpoint on
// another server: a replay check and the read after it, sent as two
// statements, are two transactions and can land on two servers. So on a
// pooled node a read that needs a position is proven inside its own
// transaction: the lease begins a read-only transaction with the check
// (one round trip with pgx, two with lib/pq), the read runs in it, and
// the transaction ends when the lease is given back (one more round
// trip). The pgx-native handle sends its check in the read's own flight
// instead, where it can (pgxroute.go).
//
// A transaction of the caller cannot be wrapped so: its BEGIN would start
// nothing (its isolation level would be lost), and under REPEATABLE READ
// a check inside it would fix the snapshot before the position is proven.
// It does not go to a pooled replica when it needs a position.

// checkReplay reads the replay position of p's server for a read that
// needs one, in a transaction of its own on a pooled node (inTx).
func checkReplay(ctx context.Context, p *physical) (replay LSN, inTx bool, err error) {
	if !p.node.pooled.Load() {
		replay, err = queryLSN(ctx, p.conn, replaySQL)
		return replay, false, err
	}
	replay, err = p.wire.beginChecked(ctx, p)
	if err != nil {
		return 0, false, err
	}
	return replay, true, nil
}

// endCheckTx ends the transaction of a lease whose check began one, once
// its read is done, before the connection goes back; *err becomes an
// error that closes the connection when that fails.
func (l *lease) endCheckTx(err *error) {
	if !l.inTx {
		return
	}
	l.inTx = false
	if *err == nil || !sqlstate.ServerGone(*err) {
		if e := endCheckTx(l.p, l.c.cfg.ProbeTimeout); e != nil {
			*err = e
		}
	}
}

// endCheckTx ends the transaction a pooled check began on p (timeout at
// most: the caller is done with the read). An error closes the
// connection rather than lend it inside a transaction.
func endCheckTx(p *physical, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, err := execInner(ctx, p.conn, "ROLLBACK", nil)
	if err != nil {
		return driver.ErrBadConn
	}
	return nil
}

// Reads with their replay check in their own flight, for both front
// doors (guardedRead): a read whose replica is not known to have its
// position sends the check and the query as one pipeline under one Sync
// when the inner driver is pgx (the pgx-native handle's operations do
// this themselves; a database/sql query does it through
// internal/pgxflight, flightQuery), at the round trip it costs pgx's
// stdlib, on the very server that answers. When the replica turns out
// behind, its rows are dropped unseen and the read goes where the plan
// says. lib/pq cannot pipeline, nor can simple_protocol: those reads
// check first.

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
		pingLimit = n.answers.HedgeDelay(c.settings.hedgeDelay) // as acquireReplica
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

// run sends the check and the query on p in one flight and reads up to
// the query's first row (pgxflight.Run). It returns the replay position
// the check read, and pgxroute.ErrBehind, having handed out nothing, when
// it does not meet need.
func (q *flightQuery) run(p *physical, need pgxroute.Need) (LSN, error) {
	w, ok := p.wire.(*pgxWire)
	if !ok {
		return 0, pgxflight.ErrNoFlight
	}
	if err := convertArgs(p.conn, q.args); err != nil {
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
	return cfg.Params["default_query_exec_mode"] != "simple_protocol"
}
