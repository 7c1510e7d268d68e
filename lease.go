package pgreplica

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/puddle/v2"

	"github.com/pgreplica/pgreplica/internal/inner"
	"github.com/pgreplica/pgreplica/internal/monoclock"
	"github.com/pgreplica/pgreplica/internal/pgxtrace"
	"github.com/pgreplica/pgreplica/internal/sqlstate"
	"github.com/pgreplica/pgreplica/internal/stmtclass"
)

// A lease is one borrowed physical connection, held until its statement or
// transaction is done; the primitive borrows make one: the primary's
// connection (waiting for one while there is none), a replica's within
// its hedge delay, the replica of a session's last read, the proof that a
// connection of an endpoint or a pooler reaches a server with the read's
// position, and a connection to describe a statement on (describe).

// lease is one physical connection borrowed under a plan.
type lease struct {
	c       *router
	res     *puddle.Resource[*physical]
	p       *physical
	replica bool
	// slot is set when the lease holds one of the bounded fallback slots.
	slot bool
	// known is the replica's replay position known before the statement.
	known LSN
	// start is when the statement was about to be sent (the borrow's
	// clock reading, physical.lent); answered when its answer came (zero
	// until it did).
	start, answered monoclock.Time
	// watch gives up on the statement once its context ended (lib/pq
	// only; see deadlineWatch).
	watch *deadlineWatch
	// inTx: the lease began a transaction for its replay check, which
	// ends when it is given back (replaycheck.go).
	inTx bool
}

func (r *router) newLease(res *puddle.Resource[*physical], replica, slot bool) lease {
	p := res.Value()
	p.node.inflight.Add(1)
	return lease{c: r, res: res, p: p, replica: replica, slot: slot, known: p.knownReplay(),
		start: p.lent}
}

// release gives the connection back (closing it when err says it is
// broken) and frees the fallback slot. It reads l before the connection
// goes back: l may be the connection's own record (physical.pgx), which
// the next borrower overwrites.
func (l *lease) release(err error) {
	l.watch.end()
	l.endCheckTx(&err)
	n, slot, c := l.p.node, l.slot, l.c
	n.inflight.Add(-1)
	n.pool.release(l.res, err)
	if slot {
		c.fallbacks.release()
	}
}

// observeAnswer notes that l's replica answered now: when (answered) and
// how long it took (for the hedge delay).
func (l *lease) observeAnswer() {
	l.answered = monoclock.Now()
	l.p.node.answers.Observe(l.answered.Sub(l.start))
}

// leasePrimary borrows a connection to the primary, waiting for one while
// there is none for a moment (awaitPrimary), or says why there is none.
func (r *router) leasePrimary(ctx context.Context, t *topology, slot bool) (lease, error) {
	l, err := r.tryLeasePrimary(ctx, t, slot)
	if err == nil || !errors.Is(err, ErrNoPrimary) || ctx.Err() != nil || !primaryAwaited(r.topo.Load()) {
		return l, err
	}
	return r.awaitPrimary(ctx, slot, err)
}

// tryLeasePrimary borrows a connection to the primary, or says why there
// is none.
func (r *router) tryLeasePrimary(ctx context.Context, t *topology, slot bool) (lease, error) {
	pv := t.primaryNode()
	if pv == nil {
		return lease{}, t.writeErr
	}
	for {
		res, err := pv.n.pool.acquire(ctx)
		if err != nil {
			if ctx.Err() == nil && sqlstate.ConnLost(err) {
				// The primary went away since the last probe; the monitor
				// will say so too in a moment. Nothing was sent.
				var he *HostError
				if errors.As(err, &he) {
					return lease{}, &hostsError{kinds: []error{ErrNoPrimary}, failed: []*HostError{he}}
				}
				return lease{}, fmt.Errorf("%w: %w", ErrNoPrimary, err)
			}
			return lease{}, err
		}
		p := res.Value()
		if !p.madeInRecovery || promotedUnder(pv, p) {
			return r.newLease(res, false, slot), nil
		}
		// The address led this connection to a replica (a writer endpoint
		// still sending to the demoted primary): not the primary's,
		// whatever the probe said of the address. Nothing was sent.
		// Pooled ones are replaced at once; a new one that reached a
		// replica too means the address does not lead to the primary
		// now: the statement waits for one that does.
		fresh := p.returned == p.created
		pv.n.pool.release(res, errNotPrimaryConn)
		if fresh {
			pv.n.markSuspect()
			return lease{}, fmt.Errorf("%w: %w", ErrNoPrimary, newHostError(pv.n.name, errNotPrimaryConn))
		}
	}
}

// promotedUnder reports whether p, made while its server was a replica,
// reaches the very server (the same incarnation) the probe found the
// primary since, behind an address that leads to no other server and no
// pooler (whose server connections are not the client's): the replica
// was promoted under it, and its next transaction may write. Replacing
// such connections made every write waiting at a Patroni promotion dial
// its own, at once: 55 ms on an idle 2-core machine, over 0.5 s on a
// busy one (docs/platforms.md).
func promotedUnder(pv *nodeView, p *physical) bool {
	return p.srv != nil && p.srv == pv.status.server && !pv.n.endpoint.Load() && !pv.n.pooled.Load()
}

// acquireReplica borrows a connection to replica n. When another replica
// could serve the read and n has no idle connection, it waits no longer
// than n's hedge delay for a new one: a frozen server accepts the TCP
// connection and never answers its startup, and the read would wait for
// it until its deadline. The dial goes on in the pool's background. The
// health check of an idle connection gets no longer either. While a dial
// to n is under way already, the read does not start another: it goes
// where another replica or the plan sends it, and the dial serves a later
// read (on a loaded machine, where dials outlast the delay, every read of
// every process started one: 48 processes reading 4 times a second held
// 3 or 4 connections each to each replica).
func (r *router) acquireReplica(ctx context.Context, n *node, others bool) (*puddle.Resource[*physical], error) {
	delay, hedged := r.pingLimit(n, others)
	if !hedged {
		return n.pool.acquireRead(ctx)
	}
	if res, ok := n.pool.tryAcquire(ctx, delay); ok {
		return res, nil
	}
	if n.pool.dialing.Load() > 0 {
		return nil, errDialing
	}
	actx, cancel := context.WithTimeout(ctx, delay)
	defer cancel()
	res, err := n.pool.acquireRead(actx) // after the monitor's connection, if it holds one
	if err != nil && ctx.Err() == nil && actx.Err() != nil {
		// The caller's deadline did not pass: say what did (a read's
		// error must not match context.DeadlineExceeded for it).
		err = errSlowConnect
	}
	return res, err
}

// pingLimit is how long the health check of an idle connection of
// replica n may take for a read: n's hedge delay when reads are hedged
// and another replica could serve it (others; hedged, and a new
// connection is waited for no longer either), else the pool's limit.
func (r *router) pingLimit(n *node, others bool) (limit time.Duration, hedged bool) {
	if !others || r.settings.hedgeDelay <= 0 {
		return n.pool.pingTimeout, false
	}
	return n.answers.HedgeDelay(r.settings.hedgeDelay), true
}

var (
	// errDialing: the replica's pool has no idle connection and is making
	// one already (acquireReplica).
	errDialing = errors.New("no idle connection, one being made")
	// errSlowConnect: no connection to the replica within its hedge delay.
	errSlowConnect = errors.New("no connection within the hedge delay")
)

// needOn is the position a read under pl must be proven to have on a
// connection of n before it runs there: none for a node with one server
// (selection proved it); for an endpoint or a pooler, the plan's position
// and the one its lag bounds stand for. The node's lag is that of the
// server its probe reached, which says nothing of the server a
// connection reaches: a server within MaxLag (or WithMaxStaleness) has
// replayed what the primary had written that long ago.
func (r *router) needOn(pl *plan, n *node) LSN {
	if !n.perConn.Load() {
		return 0
	}
	need := pl.need
	if pl.maxLag > 0 {
		if then, ok := r.primaryLSNs.PositionAt(time.Now().Add(-pl.maxLag)); ok {
			need = max(need, LSN(then))
		}
	}
	return need
}

// leaseAffine serves a session's read on the replica its last read used
// (pl.prefer), on a connection that reaches the server of that read and
// is older than it (physical.affine): the server has not restarted since,
// replay only moves forward, so the read cannot see less than the last
// one did and no bound on the last read is needed. proven asks that the
// replica also be known to have pl.need (pl.fresh); otherwise the read
// checks it in its own flight (inflight.go). Reports false when that is
// not possible.
func (r *router) leaseAffine(ctx context.Context, pl *plan, proven bool) (lease, bool) {
	i := pl.prefer.idx
	if i >= len(pl.topo.nodes) {
		return lease{}, false // a node newer than the plan's topology (resolve.go)
	}
	v := &pl.topo.nodes[i]
	if v.n != pl.prefer || proven && (!pl.fresh.has(i) || pl.tried.has(i)) || !proven && pl.reject(v, false) != rejectNone {
		return lease{}, false
	}
	res, err := pl.prefer.pool.acquireRead(ctx)
	if err != nil {
		return lease{}, false
	}
	if !res.Value().affine(pl.preferServer, pl.preferSince) {
		pl.prefer.pool.release(res, nil) // maybe another server, or incarnation
		return lease{}, false
	}
	if proven && res.Value().knownReplay() < r.needOn(pl, pl.prefer) {
		// Behind an endpoint selection saw the least of its servers and
		// the lag of its probe's: this server must be known to have the
		// read's position itself, its lag bound included.
		pl.prefer.pool.release(res, nil)
		return lease{}, false
	}
	return r.newLease(res, true, false), true
}

// provenOn reports whether connection p reaches a server known to have
// replayed need, reading its position on p when what is known of its
// server does not say (one round trip): for a node whose reads are proven
// per connection (an endpoint, a pooler), after selection chose it by
// what all its servers are known to have.
func (r *router) provenOn(ctx context.Context, p *physical, need LSN) (ok, inTx bool, err error) {
	if p.knownReplay() >= need {
		return true, false, nil
	}
	r.metrics.replayChecks.Add(1)
	replay, inTx, err := checkReplay(ctx, p)
	if err != nil {
		return false, inTx, err
	}
	p.node.observeOn(p.srv, replay)
	return replay >= need, inTx, nil
}

// A statement waiting for its primary asks the monitor to look again
// after primaryRetry, then twice as long each time, up to
// maxPrimaryRetry. It asks on a clock, not after each rebuild: every
// probe's answer rebuilds the topology, so asking again then probed every
// server back to back for as long as the wait lasted (thousands of probes
// in a 300 ms pooler outage, which starved the dials that would end it).
const (
	primaryRetry    = 20 * time.Millisecond
	maxPrimaryRetry = 160 * time.Millisecond
)

// primaryAwaited reports whether a statement that found no primary in t
// should wait for one: the host last known as the primary fails now (its
// probe failed, or it is suspect), or this handle knew a primary before
// and has none now (a failover's window: a switchover demotes the
// primary before it promotes another, and a failover manager brings the
// old one back in recovery before it promotes a new one). Not for split
// brain, which waiting does not end, nor for a handle that never knew a
// primary (given replicas only).
func primaryAwaited(t *topology) bool {
	if t.writeErr != nil && errors.Is(t.writeErr, ErrSplitBrain) {
		return false
	}
	if t.primarySeen {
		return true
	}
	for i := range t.nodes {
		v := &t.nodes[i]
		if v.probed && v.status.role == rolePrimary && (v.status.err != nil || v.n.suspect.Load()) {
			return true
		}
	}
	return false
}

// awaitPrimary waits for a primary while there is none (see
// primaryAwaited): until the context's deadline, or for
// pgreplica_connect_timeout when it has none. The monitor is asked to
// look (see primaryRetry), each of its rebuilds is looked at, and the
// statement is sent only once a server is proven the primary. err is why
// the first borrow failed; the error of a wait that ends says how long
// it waited, and why there was no primary (each host's state).
func (r *router) awaitPrimary(ctx context.Context, slot bool, err error) (lease, error) {
	start := time.Now()
	wctx, limit := ctx, "until the context's deadline"
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, r.cfg.ConnectTimeout)
		defer cancel()
		limit = fmt.Sprintf("pgreplica_connect_timeout %v, the context having no deadline", r.cfg.ConnectTimeout)
	}
	retry := primaryRetry
	poke := time.NewTimer(0)
	defer poke.Stop()
	for {
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return lease{}, fmt.Errorf("%w (waited %v for a primary, %s: %w)", err, roundWait(time.Since(start)), limit, ctx.Err())
			}
			return lease{}, fmt.Errorf("%w (waited %v for a primary, %s)", err, roundWait(time.Since(start)), limit)
		case <-poke.C:
			r.mon.pokeAll()
			poke.Reset(retry)
			retry = min(2*retry, maxPrimaryRetry)
			continue
		case <-r.mon.changedCh():
		}
		t := r.topo.Load()
		switch {
		case t.primaryNode() != nil:
			l, lerr := r.tryLeasePrimary(ctx, t, slot)
			if lerr == nil || !errors.Is(lerr, ErrNoPrimary) {
				return l, lerr
			}
			err = lerr
		case !primaryAwaited(t):
			return lease{}, t.writeErr
		default:
			err = t.writeErr
		}
	}
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
		if e := endCheckTx(l.p, l.c.cfg.knobs.ProbeTimeout); e != nil {
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
	_, err := inner.Exec(pgxtrace.Own(ctx), p.conn, "ROLLBACK", nil) // pgreplica's, not traced
	if err != nil {
		return driver.ErrBadConn
	}
	return nil
}

// watchStatement arms lib/pq's deadline watch over the statement route
// runs on l: it and its rows end with the lease (route serves statements
// outside transactions and pinned connections). pgx needs none.
func (r *router) watchStatement(ctx context.Context, l *lease) {
	if r.pq {
		l.watch = watchDeadline(ctx, l.p.socks, r.cfg.knobs.ProbeTimeout)
	}
}

// describe asks the server to describe query and returns its parameter
// count, or the server's error. It runs on the primary: the one server
// that always has the newest schema (a replica behind a migration would
// reject a statement that is valid now, or describe it as it was). Only
// when there is no primary (a failover) does a provable read fall back to
// a replica, so that reads prepared through database/sql, which prepares a
// *sql.Stmt again on every conn it uses, keep working. A connection lost
// before the answer is retried once on another: describing has no effect.
func (r *router) describe(ctx context.Context, query string, cls stmtclass.Class) (int, error) {
	for attempt := 0; ; attempt++ {
		t := r.topo.Load()
		l, err := r.leasePrimary(ctx, t, false)
		if err != nil && errors.Is(err, ErrNoPrimary) && cls.Read && cls.Hint != stmtclass.HintPrimary {
			l, err = r.leaseAnyReplica(ctx, t, err)
		}
		if err != nil {
			return 0, err
		}
		n, err := l.p.wire.describe(ctx, l.p.conn, query)
		l.release(err)
		if err != nil && attempt == 0 && sqlstate.ConnLost(err) && ctx.Err() == nil {
			continue
		}
		return n, err
	}
}

// leaseAnyReplica borrows a connection to any replica the selection
// filters accept, for a description while there is no primary; orig is
// the reason there is none.
func (r *router) leaseAnyReplica(ctx context.Context, t *topology, orig error) (lease, error) {
	pl := plan{topo: t, read: true}
	for set := pl.replicas(false); set != 0; set &= set - 1 {
		if res, err := t.nodes[set.nth(0)].n.pool.acquireRead(ctx); err == nil {
			return r.newLease(res, true, false), nil
		}
	}
	return lease{}, orig
}
