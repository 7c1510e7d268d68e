package pgreplica

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/puddle/v2"

	"github.com/pgreplica/pgreplica/internal/monoclock"
	"github.com/pgreplica/pgreplica/internal/sqlstate"
)

// Borrowing a connection under a plan: acquire takes the primary, a
// replica that satisfies the read (leaseReplica, leaseAffine), or else
// what wait.go decides; a lease is what the caller holds
// until its statement or transaction is done.

// lease is one physical connection borrowed under a plan.
type lease struct {
	c       *Connector
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

func (c *Connector) newLease(res *puddle.Resource[*physical], replica, slot bool) lease {
	p := res.Value()
	p.node.inflight.Add(1)
	return lease{c: c, res: res, p: p, replica: replica, slot: slot, known: p.knownReplay(),
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

// acquire borrows the connection the plan calls for: the primary; a
// replica that satisfies the read; one after waiting; or the fallback.
// ran reports a read that ran already, with its replay check in its own
// flight, on the lease returned (st's rows or op hold its answer).
func (c *Connector) acquire(ctx context.Context, pl *plan, st *statement) (l lease, ran bool, err error) {
	if pl.onPrimary {
		l, err = c.leasePrimary(ctx, pl.topo, false)
		return l, false, err
	}
	if pl.conflicted {
		// The replicas replay what cancelled it: the primary serves it.
		c.metrics.noteFallback(ReasonConflict, pl.tokened(), false)
		l, err = c.fallBack(ctx, pl, errConflicts)
		return l, false, err
	}
	inFlight := st.guard != nil || st.inFlight
	if pl.pending != 0 {
		if l, ok, err := c.readAfterWrite(ctx, pl, inFlight); ok || err != nil {
			return l, false, err
		}
		if !pl.at.IsZero() {
			pl.at = time.Now() // the wait for a replica starts now
		}
	}
	if inFlight && pl.unproven() {
		if l, ran, err = c.readInFlight(ctx, pl, st); ran || err != nil {
			return l, ran, err
		}
		if pl.onPrimary || pl.conflicted {
			return c.acquire(ctx, pl, st) // retry sent it to the primary
		}
	}
	if pl.later != nil {
		if err := c.settleLater(ctx, pl); err != nil {
			return lease{}, false, err
		}
	}
	if pl.flightsBehind == 1 && inFlight && pl.unproven() {
		// The replica was a moment behind the write (its flight crossed
		// the write's WAL on its way): one more flight, which costs a
		// round trip as a primary read would, before the primary or a
		// wait.
		if l, ran, err = c.readInFlight(ctx, pl, st); ran || err != nil {
			return l, ran, err
		}
		if pl.onPrimary || pl.conflicted {
			return c.acquire(ctx, pl, st)
		}
	}
	first := pl.tried == 0
	l, err = c.leaseReplica(ctx, pl)
	if first && pl.tokened() {
		c.metrics.tokenedReads.Add(1)
		c.metrics.wait.Observe(pl.waited())
	}
	if err == nil {
		return l, false, nil
	}
	if ctx.Err() != nil {
		return lease{}, false, ctx.Err()
	}
	if nf := (*NoFreshReplicaError)(nil); errors.As(err, &nf) {
		c.metrics.noteFallback(nf.Reason, pl.tokened(), pl.fallback == FallbackError)
	}
	if pl.fallback == FallbackError {
		return lease{}, false, err
	}
	l, err = c.fallBack(ctx, pl, err)
	return l, false, err
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

// leasePrimary borrows a connection to the primary, waiting for one that
// is down for a moment (awaitPrimary), or says why there is none.
func (c *Connector) leasePrimary(ctx context.Context, t *topology, slot bool) (lease, error) {
	l, err := c.tryLeasePrimary(ctx, t, slot)
	if err == nil || !errors.Is(err, ErrNoPrimary) || ctx.Err() != nil || !c.primaryMomentarilyDown(c.topo.Load()) {
		return l, err
	}
	return c.awaitPrimary(ctx, slot, err)
}

// tryLeasePrimary borrows a connection to the primary, or says why there
// is none.
func (c *Connector) tryLeasePrimary(ctx context.Context, t *topology, slot bool) (lease, error) {
	pv := t.primaryNode()
	if pv == nil {
		return lease{}, t.writeErr
	}
	res, err := pv.n.pool.acquireForWrite(ctx)
	if err != nil {
		if ctx.Err() == nil && sqlstate.ConnLost(err) {
			// The primary went away since the last probe; the monitor will
			// say so too in a moment. Nothing was sent.
			var he *HostError
			if errors.As(err, &he) {
				return lease{}, &hostsError{kinds: []error{ErrNoPrimary}, failed: []*HostError{he}}
			}
			return lease{}, fmt.Errorf("%w: %w", ErrNoPrimary, err)
		}
		return lease{}, err
	}
	return c.newLease(res, false, slot), nil
}

// leaseReplica borrows a connection to a replica that satisfies the plan.
// One whose cached replay position proves it costs no extra round trip;
// otherwise the read waits for one (awaitReplica). A replica that refuses
// connections is left out and the next one tried.
func (c *Connector) leaseReplica(ctx context.Context, pl *plan) (lease, error) {
	if pl.prefer != nil {
		if l, ok := c.leaseAffine(ctx, pl, true); ok {
			return l, nil
		}
		if err := c.boundLastRead(ctx, pl); err != nil {
			return lease{}, err
		}
	}
	var refused []*HostError // the replicas tried that gave no connection, and why
	// pl.slow are the replicas passed over because their connection was
	// slow to come: left out of this loop, not marked tried, so that a
	// retry of the read (a replay conflict a second later) may use them.
	pl.slow = 0
	for set := pl.fresh.without(pl.tried); set != 0; set = pl.replicas(true).without(pl.slow) {
		i := c.choose(pl.topo, set)
		n := pl.topo.nodes[i].n
		res, err := c.acquireReplica(ctx, n, set.len() > 1)
		if need := c.needOn(pl, n); err == nil && need > 0 {
			// Chosen by what all its servers are known to have, and by the
			// lag of the one its probe reached: this connection may reach
			// another.
			ok, inTx, err := c.provenOn(ctx, res.Value(), need)
			if !ok {
				if inTx {
					err = endCheckTx(res.Value(), c.cfg.ProbeTimeout)
				}
				n.pool.release(res, err)
				pl.tried.add(i)
				continue
			}
			l := c.newLease(res, true, false)
			l.inTx = inTx
			return l, nil
		}
		if err == nil {
			return c.newLease(res, true, false), nil
		}
		if ctx.Err() != nil {
			return lease{}, ctx.Err()
		}
		refused = append(refused, asHostError(n.name, err))
		if errors.Is(err, errSlowConnect) || errors.Is(err, errDialing) {
			pl.slow.add(i)
			continue
		}
		pl.tried.add(i)
	}
	if pl.need > 0 {
		if pl.flightsBehind > 0 {
			if l, ok := c.recentWriteOnPrimary(ctx, pl); ok {
				return l, nil // the replica predicted to have it did not: not waited for
			}
		}
		if futile, paused := c.futile(ctx, pl); futile {
			if paused {
				// A paused replica may have resumed since its probe: one
				// look, no wait.
				wctx, cancel := context.WithDeadline(ctx, pl.waitDeadline(ctx))
				l, ok := c.checkReplicas(wctx, pl, nil)
				cancel()
				if ok {
					return l, nil
				}
			}
			return lease{}, &NoFreshReplicaError{Reason: ReasonTimeout,
				Detail: fmt.Sprintf("no replica can replay %s before the wait budget ends (predicted from their lag)", pl.need)}
		}
		return c.awaitReplica(ctx, pl)
	}
	if pl.fallback == FallbackStale {
		// Accept a replica beyond the lag bounds rather than load the
		// primary.
		stale := *pl
		stale.maxLag, stale.maxLagBytes = c.cfg.StaleFallbackLag, 0
		if set := stale.replicas(false); set != 0 {
			i := c.choose(pl.topo, set)
			if res, err := pl.topo.nodes[i].n.pool.acquire(ctx); err == nil {
				c.metrics.staleReads.Add(1)
				return c.newLease(res, true, false), nil
			}
		}
	}
	if refused != nil {
		return lease{}, &refusedError{noReplicaError(pl), refused}
	}
	return lease{}, noReplicaError(pl)
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
func (c *Connector) acquireReplica(ctx context.Context, n *node, others bool) (*puddle.Resource[*physical], error) {
	if !others || c.settings.hedgeDelay <= 0 {
		return n.pool.acquire(ctx)
	}
	delay := n.answers.HedgeDelay(c.settings.hedgeDelay)
	if res, ok := n.pool.tryAcquire(ctx, delay); ok {
		return res, nil
	}
	if n.pool.dialing.Load() > 0 {
		return nil, errDialing
	}
	actx, cancel := context.WithTimeout(ctx, delay)
	defer cancel()
	res, err := n.pool.acquire(actx) // after the monitor's connection, if it holds one
	if err != nil && ctx.Err() == nil && actx.Err() != nil {
		// The caller's deadline did not pass: say what did (a read's
		// error must not match context.DeadlineExceeded for it).
		err = errSlowConnect
	}
	return res, err
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
// replayed what the primary had written that long ago, within
// MaxLagBytes what the primary had written less those bytes.
func (c *Connector) needOn(pl *plan, n *node) LSN {
	if !n.perConnection() {
		return 0
	}
	need := pl.need
	if pl.maxLag > 0 {
		if then, ok := c.primaryLSNs.PositionAt(time.Now().Add(-pl.maxLag)); ok {
			need = max(need, LSN(then))
		}
	}
	if pv := pl.topo.primaryNode(); pl.maxLagBytes > 0 && pv != nil && uint64(pv.status.lsn) > pl.maxLagBytes {
		need = max(need, pv.status.lsn-LSN(pl.maxLagBytes))
	}
	return need
}

// leaseAffine serves a session's read on the replica its last read used
// (pl.prefer), on a connection that reaches the server of that read and
// is older than it (physical.affine): the server has not restarted since,
// replay only moves forward, so the read cannot see less than the last
// one did and no bound on the last read is needed. proven asks that the
// replica also be known to have pl.need (pl.fresh); otherwise the read
// checks it in its own flight (guardedRead). Reports false when that is
// not possible.
func (c *Connector) leaseAffine(ctx context.Context, pl *plan, proven bool) (lease, bool) {
	i := pl.prefer.idx
	v := &pl.topo.nodes[i]
	if v.n != pl.prefer || proven && (!pl.fresh.has(i) || pl.tried.has(i)) || !proven && pl.reject(v, false) != rejectNone {
		return lease{}, false
	}
	res, err := pl.prefer.pool.acquire(ctx)
	if err != nil {
		return lease{}, false
	}
	if !res.Value().affine(pl) {
		pl.prefer.pool.release(res, nil) // maybe another server, or incarnation
		return lease{}, false
	}
	return c.newLease(res, true, false), true
}

// boundLastRead makes a session read that leaves the replica of the
// session's last read see at least what that read could have seen: a
// position of that replica read after it (on a connection open since
// before it), else of the primary read after it, from the snapshot;
// else a capture of the primary's position now (one statement, shared).
func (c *Connector) boundLastRead(ctx context.Context, pl *plan) error {
	bound, ok := pl.lastReadBound, pl.lastReadBoundKnown
	if !ok {
		m := c.marksOf(pl.topo)
		t := m.issue(false, false, false)
		rctx, cancel := context.WithDeadline(ctx, pl.waitDeadline(ctx))
		err := m.resolve(rctx, c, t)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			bound = ^LSN(0) >> 1 // unknown: no replica can be proven
		} else {
			bound = LSN(m.all.Load())
		}
	}
	pl.need = max(pl.need, bound)
	pl.session.advance(bound, pl.topo.timeline, pl.topo.sysid)
	pl.prefer = nil
	pl.fresh = pl.replicas(true)
	return nil
}

func noReplicaError(pl *plan) *NoFreshReplicaError {
	why := "no healthy replica within the lag bounds"
	if pl.maxLag == 0 && pl.maxLagBytes == 0 {
		why = "no healthy replica"
	}
	return &NoFreshReplicaError{Reason: ReasonNoReplica, Detail: why}
}
