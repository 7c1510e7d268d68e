package pgreplica

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/puddle/v2"
)

// Which borrow a plan calls for: acquire takes the primary, a replica that
// satisfies the read (leaseReplica), a replica for the read to carry its
// check in its flight (inflight.go), a replica after a wait (fresh.go),
// or the primary as a fallback; the borrows themselves are lease.go's.

// acquireStep is where acquire's decision stands for a read, kept by
// route across the borrows of one statement. A read in flight that did
// not run (its replica behind, or no flight possible on the connection)
// or that failed comes back to acquire, which goes on from there: one
// more flight, a wait for a replica, or the primary. A read that ran as
// it is and is sent again (route's retry) starts over.
type acquireStep uint8

const (
	// stepStart: the position of a pending write first, then a first
	// flight.
	stepStart acquireStep = iota
	// stepSettle: a first flight was tried; the position read beside it
	// is settled, then one more flight if it found its replica behind.
	stepSettle
	// stepReplica: the flights were tried; a replica proven otherwise, a
	// wait for one, or the fallback.
	stepReplica
)

// acquire borrows the connection the plan calls for: the primary; a
// replica that satisfies the read; one for the read to carry its replay
// check in its own flight (inFlight: the statement may); one after
// waiting; or the fallback. check is, for a read route runs in flight,
// the position its check must find replayed (never 0: such a read needs
// a position); 0 for a read run as it is. step is where the decision
// stands (see acquireStep), which acquire moves on.
func (r *router) acquire(ctx context.Context, pl *plan, inFlight bool, step *acquireStep) (l lease, check LSN, err error) {
	if pl.onPrimary {
		l, err = r.leasePrimary(ctx, pl.topo, false)
		return l, 0, err
	}
	if pl.conflicted {
		// The replicas replay what cancelled it: the primary serves it.
		r.metrics.noteFallback(ReasonConflict, pl.tokened(), false)
		l, err = r.fallBack(ctx, pl, errConflicts)
		return l, 0, err
	}
	switch *step {
	case stepStart:
		if pl.pending != 0 {
			if l, ok, err := r.readAfterWrite(ctx, pl, inFlight); ok || err != nil {
				return l, 0, err
			}
			if !pl.at.IsZero() {
				pl.at = time.Now() // the wait for a replica starts now
			}
		}
		*step = stepSettle
		if inFlight && pl.unproven() {
			if l, check, err := r.leaseInFlight(ctx, pl); check != 0 || err != nil {
				return l, check, err
			}
		}
		fallthrough
	case stepSettle:
		if pl.later != nil {
			if err := r.settleLater(ctx, pl); err != nil {
				return lease{}, 0, err
			}
		}
		*step = stepReplica
		if pl.flightsBehind == 1 && inFlight && pl.unproven() && !pl.replicasLate(true, time.Now(), &r.primaryLSNs) {
			// The replica was a moment behind the write (its flight crossed
			// the write's WAL on its way): one more flight, which costs a
			// round trip as a primary read would, before the primary or a
			// wait; not when what the flights learned predicts every
			// replica behind it still (flightages.go).
			if l, check, err := r.leaseInFlight(ctx, pl); check != 0 || err != nil {
				return l, check, err
			}
		}
	}
	first := pl.tried == 0
	l, err = r.leaseReplica(ctx, pl)
	if first {
		r.noteTokenedRead(pl)
	}
	if err == nil {
		return l, 0, nil
	}
	if ctx.Err() != nil {
		return lease{}, 0, withContextErr(ctx, err)
	}
	if nf := (*NoFreshReplicaError)(nil); errors.As(err, &nf) {
		r.metrics.noteFallback(nf.Reason, pl.tokened(), pl.fallback == FallbackError)
	}
	if pl.fallback == FallbackError {
		return lease{}, 0, err
	}
	l, err = r.fallBack(ctx, pl, err)
	return l, 0, err
}

// noteTokenedRead counts a read with a position requirement, with how
// long it waited for a replica: once it first asked for a replica that
// satisfies it (leaseReplica, whether one did or it fell back), or, for
// a read in flight, once it ran.
func (r *router) noteTokenedRead(pl *plan) {
	if pl.tokened() {
		r.metrics.tokenedReads.Add(1)
		r.metrics.wait.Observe(pl.waited())
	}
}

// leaseReplica borrows a connection to a replica that satisfies the plan.
// One whose cached replay position proves it costs no extra round trip;
// otherwise the read waits for one (awaitReplica). A replica that refuses
// connections is left out and the next one tried.
func (r *router) leaseReplica(ctx context.Context, pl *plan) (lease, error) {
	if pl.prefer != nil {
		if l, ok := r.leaseAffine(ctx, pl, true); ok {
			return l, nil
		}
		if err := r.boundLastRead(ctx, pl); err != nil {
			return lease{}, err
		}
	}
	var refused []*HostError // the replicas tried that gave no connection, and why
	// pl.slow are the replicas passed over because their connection was
	// slow to come: left out of this loop, not marked tried, so that a
	// retry of the read (a replay conflict a second later) may use them.
	pl.slow = 0
	patient := false // only replicas slow to give a connection are left
	for set := pl.fresh.without(pl.tried); set != 0; set = pl.nextReplicas(&patient) {
		i := r.choose(pl.topo, set)
		n := pl.topo.nodes[i].n
		var res *puddle.Resource[*physical]
		var err error
		if patient {
			res, err = r.awaitReplicaConn(ctx, pl, n)
		} else {
			// Replicas passed over as slow count as others: the patient
			// pass waits for them, so n's connection is waited for no
			// longer than its hedge delay either (a frozen n would hold
			// the read until its deadline).
			res, err = r.acquireReplica(ctx, n, set.len() > 1 || pl.slow != 0)
		}
		if need := r.needOn(pl, n); err == nil && need > 0 {
			// Chosen by what all its servers are known to have, and by the
			// lag of the one its probe reached: this connection may reach
			// another.
			ok, inTx, err := r.provenOn(ctx, res.Value(), need)
			if !ok {
				if inTx {
					err = endCheckTx(res.Value(), r.cfg.knobs.ProbeTimeout)
				}
				n.pool.release(res, err)
				pl.tried.add(i)
				continue
			}
			l := r.newLease(res, true, false)
			l.inTx = inTx
			return l, nil
		}
		if err == nil {
			return r.newLease(res, true, false), nil
		}
		if ctx.Err() != nil {
			return lease{}, withContextErr(ctx, err)
		}
		refused = append(refused, asHostError(n.name, err))
		if !patient && (errors.Is(err, errSlowConnect) || errors.Is(err, errDialing)) {
			pl.slow.add(i)
			continue
		}
		pl.tried.add(i)
	}
	if pl.need > 0 {
		if pl.flightsBehind > 0 {
			if l, ok := r.recentWriteOnPrimary(ctx, pl); ok {
				return l, nil // the replica predicted to have it did not: not waited for
			}
		}
		if lowered, err := r.lowerUnwritten(ctx, pl); err != nil {
			return lease{}, err
		} else if lowered {
			return r.leaseReplica(ctx, pl) // once: the position is now written
		}
		if futile, paused := r.futile(ctx, pl); futile {
			if paused {
				// A paused replica may have resumed since its probe: one
				// look, no wait.
				wctx, cancel := context.WithDeadline(ctx, pl.waitDeadline(ctx))
				l, ok := r.checkReplicas(wctx, pl, nil)
				cancel()
				if ok {
					return l, nil
				}
			}
			return lease{}, futileWaitError(ctx, pl)
		}
		return r.awaitReplica(ctx, pl)
	}
	if refused != nil {
		return lease{}, &refusedError{noReplicaError(pl), refused}
	}
	return lease{}, noReplicaError(pl)
}

// nextReplicas returns the replicas leaseReplica tries next: those not
// tried nor passed over as slow; when none is left but some were slow,
// those, and patient is set: a replica slow to give a connection is a
// better place for the read than the primary (a replica killed beside
// one whose pool was dialing sent reads to the primary).
func (pl *plan) nextReplicas(patient *bool) nodeSet {
	if *patient {
		return pl.replicas(true)
	}
	if set := pl.replicas(true).without(pl.slow); set != 0 {
		return set
	}
	*patient = pl.slow != 0
	return pl.replicas(true)
}

// awaitReplicaConn borrows a connection to replica n for as long as the
// read may wait for a replica (the wait budget within ctx): n was only
// slow to give one, and no other replica can.
func (r *router) awaitReplicaConn(ctx context.Context, pl *plan, n *node) (*puddle.Resource[*physical], error) {
	wctx, cancel := context.WithDeadline(ctx, pl.waitDeadline(ctx))
	defer cancel()
	res, err := n.pool.acquireRead(wctx)
	if err != nil && ctx.Err() == nil && wctx.Err() != nil {
		err = errSlowConnect // the wait budget ran out, not the caller's deadline
	}
	return res, err
}

// boundLastRead makes a session read that leaves the replica of the
// session's last read see at least what that read could have seen: a
// position of that replica read after it (on a connection open since
// before it), else of the primary read after it, from the snapshot;
// else a capture of the primary's position now (one statement, shared).
func (r *router) boundLastRead(ctx context.Context, pl *plan) error {
	bound, ok := pl.lastReadBound, pl.lastReadBoundKnown
	if !ok {
		m := pl.topo.marks
		t := m.Issue(false, false, false)
		rctx, cancel := context.WithDeadline(ctx, pl.waitDeadline(ctx))
		err := m.Resolve(rctx, r.capturing(), t)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return waitEnded(ctx, "the primary's position, to bound a session read that leaves its last replica", pl.at)
			}
			// Unknown: this read cannot be proven on a replica, and the
			// session keeps what it had (its next read asks again).
			pl.need, pl.fresh, pl.prefer = unprovableLSN, 0, nil
			return nil
		}
		bound = LSN(m.All())
	}
	pl.need = max(pl.need, bound)
	pl.session.advance(bound, pl.topo.timeline, pl.topo.sysid)
	pl.prefer = nil
	pl.fresh = pl.replicas(true)
	return nil
}

// errConflicts is why a read fell back after replay conflicts (logs).
var errConflicts = errors.New("replay conflicts cancelled the read on the replicas")

// fallBack serves a read on the primary, which no replica could serve
// (why), within the bound on concurrent fallbacks.
func (r *router) fallBack(ctx context.Context, pl *plan, why error) (lease, error) {
	r.log.DebugContext(ctx, "pgreplica: read falls back to the primary", "err", why)
	r.metrics.fallbackReads.Add(1)
	if err := r.fallbacks.take(ctx); err != nil {
		if fl := (*fallbackLimitError)(nil); errors.As(err, &fl) {
			fl.why = why
		}
		return lease{}, err
	}
	l, err := r.leasePrimary(ctx, r.topo.Load(), true) // the latest primary
	if err != nil {
		r.fallbacks.release()
		if errors.Is(err, ErrNoPrimary) {
			// Say why the replicas could not serve it either.
			err = fmt.Errorf("%w, and no primary to fall back to: %w", why, err)
		}
	}
	return l, err
}
