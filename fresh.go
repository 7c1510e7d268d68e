package pgreplica

import (
	"context"
	"time"

	"github.com/jackc/puddle/v2"

	"github.com/pgreplica/pgreplica/internal/lagtrack"
	"github.com/pgreplica/pgreplica/internal/monoclock"
)

// Waiting and falling back: a read for the position of a write not read
// yet (readAfterWrite), for a replica to replay what it needs (futile
// says whether it can in time, awaitReplica polls), and any statement for
// a primary that refuses connections for a moment (awaitPrimary); a read
// no replica could serve goes to the primary, within the bound on
// concurrent fallback reads (fallBack, fallbackGate).

// readAfterWrite handles a read that needs a write whose position is not
// read yet (pl.pending). When no replica is
// predicted to answer it as soon as the primary (replicasLate), it takes
// the primary at once if a fallback slot is free (ok). Otherwise it reads
// the position (sharing the statement with concurrent readers and the
// background capture, which a loaded machine may have delayed) and lets
// the read look for a replica that has it. A read that can carry its
// replay check in its own flight (beside) does not wait for the
// position: it is read on the primary while the read flies to a replica,
// and the check compares the two (laterPos), so the read takes one round
// trip, not two.
func (r *router) readAfterWrite(ctx context.Context, pl *plan, beside bool) (l lease, ok bool, err error) {
	m := pl.topo.marks
	if m.Covered() < pl.pending {
		if pl.replicasLate(beside, time.Now(), &r.primaryLSNs) {
			if l, ok := r.recentWriteOnPrimary(ctx, pl); ok {
				return l, true, nil
			}
		}
		if beside {
			pl.later = r.readBeside(ctx, m, pl.pending, pl.waitDeadline(ctx))
			pl.need = max(pl.need, LSN(m.All()))
			pl.pending, pl.fresh = 0, 0
			return lease{}, false, nil
		}
		if err := r.resolveUntil(ctx, m, pl.pending, pl.waitDeadline(ctx)); err != nil {
			if ctx.Err() != nil {
				return lease{}, false, waitEnded(ctx, "the position of a write the read must see", pl.at)
			}
			// The position cannot be read (no primary during a failover):
			// no replica can be proven to have the write.
			pl.fresh, pl.need = 0, unprovableLSN
			return lease{}, false, nil
		}
	}
	// Covered: the marks hold a position at or past the write's.
	pl.need = max(pl.need, LSN(m.All()))
	pl.pending = 0
	pl.fresh = pl.replicas(true)
	return lease{}, false, nil
}

// recentWriteOnPrimary serves on the primary a read that needs a write
// of its process or session whose position was not known when it was
// planned (pl.pendingWriteAt), when a
// fallback slot is free (ok): the replicas are predicted to have the
// write later than the primary would answer (replicasLate), or those
// predicted to have it did not (the checks in the read's two flights
// found them behind). Waiting for a replica then costs a replay check at
// least, and a sleep between checks, where the primary costs one round
// trip.
func (r *router) recentWriteOnPrimary(ctx context.Context, pl *plan) (lease, bool) {
	if pl.pendingWriteAt.IsZero() || r.cfg.knobs.WaitAfterWrite || pl.fallback == FallbackError || !r.fallbacks.tryTake() {
		return lease{}, false
	}
	l, err := r.leasePrimary(ctx, pl.topo, true)
	if err != nil {
		r.fallbacks.release() // no primary now: prove a replica fresh
		return lease{}, false
	}
	r.metrics.recentWriteReads.Add(1)
	return l, true
}

// readBeside starts reading the position of ticket, as resolveUntil does,
// while the caller sends its read.
func (r *router) readBeside(ctx context.Context, m *clusterMarks, ticket uint64, deadline time.Time) *laterPos {
	lp := &laterPos{done: make(chan struct{}), m: m}
	go func() {
		defer close(lp.done)
		lp.err = r.resolveUntil(ctx, m, ticket, deadline)
	}()
	return lp
}

// settleLater waits for the position read beside the read's flight and
// makes it the plan's, as readAfterWrite does when it reads it first.
func (r *router) settleLater(ctx context.Context, pl *plan) error {
	lp := pl.later
	pl.later = nil
	select {
	case <-lp.done:
	case <-ctx.Done():
		return waitEnded(ctx, "the position of a write the read must see", pl.at)
	}
	if lp.err != nil {
		if ctx.Err() != nil {
			return waitEnded(ctx, "the position of a write the read must see", pl.at)
		}
		// The position cannot be read (no primary during a failover):
		// no replica can be proven to have the write.
		pl.fresh, pl.need = 0, unprovableLSN
		return nil
	}
	pl.need = max(pl.need, LSN(lp.m.All()))
	pl.fresh = pl.replicas(true)
	return nil
}

// replicasLate predicts whether a replica would answer a read of the
// pending write, asked at now, later than the primary (the read goes
// there then). A read that carries its check in its flight (beside) costs
// a replica's round trip, the write's position being read beside it: it
// is late only when every replica the read may use is predicted to
// replay the write more than a primary round trip from now (the write's
// time plus the replica's measured time lag, never less than its
// recovery_min_apply_delay; a paused one is late, and so is one whose
// flights found it behind writes older than this one, flightages.go).
// Otherwise the
// position costs a round trip of its own before the read, and a write
// younger than youngWrite is taken to be on no replica yet.
func (pl *plan) replicasLate(beside bool, now time.Time, primary *lagtrack.Tracker) bool {
	if pl.pendingWriteAt.IsZero() {
		return false // only a session read's bound is pending: resolved, never sent to the primary
	}
	if !beside {
		return now.Sub(pl.pendingWriteAt) < youngWrite
	}
	p := pl.topo.primaryNode()
	if p == nil {
		return false
	}
	age := now.Sub(pl.pendingWriteAt)
	ahead, at := p.n.rttEWMA()+age, monoclock.Of(now)
	if pl.prefer != nil && pl.prefer.flights.late(age, at) {
		// A session read flies to the replica of its last read
		// (leaseUnproven): that one's flights decide.
		return true
	}
	for set := pl.replicas(false); set != 0; set &= set - 1 {
		v := &pl.topo.nodes[set.nth(0)]
		if v.n.endpoint.Load() {
			// The probe reached one server behind it: each server's own
			// looks decide (server.go, serverLook).
			if !v.n.serversLate(ahead, now, primary) {
				return false
			}
			continue
		}
		if !v.status.paused && max(v.lag, v.status.applyDelay) <= ahead && !v.n.flights.late(age, at) {
			return false // a paused replica replays nothing: late
		}
	}
	return true
}

// withoutLate returns set without the replicas whose flights found them
// behind writes older than the read's (flightages.go): a read flies to a
// replica that may have its write, and to one that has not been tried,
// so that every replica's flights learn, not only those of the one the
// picker or an idle connection favours.
func (pl *plan) withoutLate(set nodeSet, now time.Time) nodeSet {
	if pl.pendingWriteAt.IsZero() {
		return set
	}
	age, at := now.Sub(pl.pendingWriteAt), monoclock.Of(now)
	for rest := set; rest != 0; rest &= rest - 1 {
		if i := rest.nth(0); pl.topo.nodes[i].n.flights.late(age, at) {
			set &^= 1 << uint(i)
		}
	}
	return set
}

// youngWrite is the age under which a write is taken to be on no replica
// yet when its position must be read before the read: about when its
// background capture is due. Replication on a fast network takes about
// as long.
const youngWrite = captureDelay

// resolveUntil resolves ticket, trying again while it fails (a failover:
// the new primary may be known in a moment) until deadline.
func (r *router) resolveUntil(ctx context.Context, m *clusterMarks, ticket uint64, deadline time.Time) error {
	rctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	for {
		err := m.Resolve(rctx, r.capturing(), ticket)
		if err == nil || rctx.Err() != nil {
			return err
		}
		select {
		case <-r.mon.changedCh():
		case <-rctx.Done():
			return err
		}
	}
}

// futile predicts whether waiting for a replica to replay pl.need can
// succeed before the plan's deadline. A replica applies a commit no
// sooner than its recovery_min_apply_delay after the primary wrote it, and
// replays the bytes it lacks at the rate it was seen replaying a backlog;
// a paused one replays nothing until a probe shows it resumed. A wait
// that no replica is predicted to end in time is not started: the read
// falls back at once (paused says a paused replica was passed over: it may
// have resumed since its probe, worth one look but no wait). Without a
// prediction (an idle replica, whose rate is unknown) the read waits as
// before.
func (r *router) futile(ctx context.Context, pl *plan) (futile, paused bool) {
	deadline := pl.waitDeadline(ctx)
	now := time.Now()
	reached, ok := r.primaryLSNs.ReachedAt(uint64(pl.need))
	if !ok {
		reached = now // the primary reached it after its last sample
	}
	for set := pl.replicas(false); set != 0; set &= set - 1 {
		v := &pl.topo.nodes[set.nth(0)]
		if v.n.endpoint.Load() {
			// The probe reached one server behind it: each server's own
			// looks decide (server.go, serverLook).
			if !v.n.serversFutile(pl.need, reached, deadline, now, &r.primaryLSNs) {
				return false, false
			}
			continue
		}
		if v.status.lsn >= pl.need {
			// Its probe saw it past the position, whatever its apply
			// delay is now (a delay raised since applies to later
			// commits); behind a pooler, the only such sign.
			return false, false
		}
		if v.status.paused && LSN(v.n.replay.Load()) < pl.need {
			paused = true
			continue // cannot serve it: a paused replica proves nothing of the others
		}
		ready := reached.Add(v.status.applyDelay)
		// The rate predicts only while replay is the bottleneck (a
		// backlog of WAL received and waiting, rateBacklog or more): a
		// replica that replays what it gets at once shows the primary's
		// write rate, not its own speed, and a few records in flight
		// are no backlog. It
		// has replayed since the probe that saw it behind: the
		// prediction runs from that probe, not from now (on a loaded
		// machine probes come late, and a replica that has long caught
		// up would be given up on without a look).
		if behind := pl.need - min(pl.need, LSN(v.n.replay.Load())); behind > 0 && v.status.replayRate > 0 && v.status.receive >= v.status.lsn+rateBacklog {
			sampled := v.status.at
			if sampled.IsZero() {
				sampled = now
			}
			if r := sampled.Add(time.Duration(float64(behind) / v.status.replayRate * float64(time.Second))); r.After(ready) {
				ready = r
			}
		}
		if !ready.After(deadline) {
			return false, false
		}
	}
	return true, paused
}

// rateBacklog is the least backlog of received WAL for which a replica's
// replay rate predicts its catch-up (see futile). Less is replayed in
// milliseconds by any replica, whatever rate sparse writes made it show.
const rateBacklog = 1 << 20

// awaitReplica polls the eligible replicas, each on the connection that
// will run the query, until one has replayed pl.need or the plan's
// deadline passes.
func (r *router) awaitReplica(ctx context.Context, pl *plan) (lease, error) {
	wctx, cancel := context.WithDeadline(ctx, pl.waitDeadline(ctx))
	defer cancel()
	backoff := time.Millisecond
	var best LSN
	for {
		if pl.replicas(false) == 0 {
			return lease{}, noReplicaError(pl)
		}
		if l, ok := r.checkReplicas(wctx, pl, &best); ok {
			return l, nil
		}
		if ctx.Err() != nil {
			return lease{}, replicaWaitError(ctx, pl, best)
		}
		// The last check starts shortly before the deadline, so that a
		// replica catching up late in the budget still serves the read.
		left := time.Until(pl.deadline) - lastCheckMargin
		if left <= 0 {
			return lease{}, replicaWaitError(ctx, pl, best)
		}
		select {
		case <-time.After(min(backoff, left)):
		case <-wctx.Done():
		}
		backoff = min(2*backoff, 16*time.Millisecond)
	}
}

// lastCheckMargin is left for the last replay check of a wait: a loopback
// round trip takes well under a millisecond.
const lastCheckMargin = time.Millisecond

// checkReplicas checks the eligible replicas' replay once each, on the
// connection that will run the query, and leases the first that has
// replayed pl.need; best (if not nil) is raised to the highest position
// seen.
func (r *router) checkReplicas(ctx context.Context, pl *plan, best *LSN) (lease, bool) {
	for set := pl.replicas(false); set != 0; set &= set - 1 {
		if l, ok := r.checkNode(ctx, pl, pl.topo.nodes[set.nth(0)].n, best); ok {
			return l, true
		}
	}
	return lease{}, false
}

// checkNode checks replica n's replay on a connection of its and leases
// that connection when it has replayed what the plan needs. Behind an
// endpoint each connection may reach another server: one found behind,
// or whose server is known to be too late, is held while a few more are
// tried (serverTries), so that the next borrow does not hand back the
// same one.
func (r *router) checkNode(ctx context.Context, pl *plan, n *node, best *LSN) (lease, bool) {
	var inTx bool
	res, _ := r.onServers(ctx, n, func(p *physical) (bool, error) {
		if srv := p.servedBy(); srv != nil && n.endpoint.Load() {
			// What is known of this connection's server may settle it
			// without a round trip (server.go, serverLook).
			need, now := max(pl.need, r.needOn(pl, n)), time.Now()
			if LSN(srv.replay.Load()) >= need {
				return true, nil
			}
			reached, ok := r.primaryLSNs.ReachedAt(uint64(need))
			if !ok {
				reached = now
			}
			if srv.tooLate(need, reached, pl.waitDeadline(ctx), now, &r.primaryLSNs) {
				return false, nil
			}
		}
		r.metrics.replayChecks.Add(1)
		replay, tx, err := checkReplay(ctx, p)
		if err == nil {
			n.observeOn(p.srv, replay)
			if best != nil {
				*best = max(*best, replay)
			}
			if replay >= max(pl.need, r.needOn(pl, n)) {
				inTx = tx
				return true, nil
			}
		}
		if tx {
			err = endCheckTx(p, r.cfg.knobs.ProbeTimeout)
		}
		return false, err
	})
	if res == nil {
		return lease{}, false
	}
	res.Value().lent = monoclock.Now() // the read starts after the check
	l := r.newLease(res, true, false)
	l.inTx = inTx
	return l, true
}

// onServers borrows connections of n one after another, at most
// serverTries, until accept takes one, which it returns (nil when none
// was taken). Each it turns down is held meanwhile, so that the next
// borrow reaches another connection (behind an endpoint, maybe another
// server); an error of accept closes that connection and ends the
// search. The error is the first borrow's: a later one that fails only
// ends the search.
func (r *router) onServers(ctx context.Context, n *node, accept func(p *physical) (bool, error)) (*puddle.Resource[*physical], error) {
	var held []*puddle.Resource[*physical]
	defer func() {
		for _, res := range held {
			n.pool.release(res, nil)
		}
	}()
	for i := range r.serverTries(n) {
		res, err := r.acquireAnother(ctx, n, i)
		if err != nil {
			if i > 0 && ctx.Err() == nil {
				return nil, nil
			}
			return nil, err
		}
		ok, err := accept(res.Value())
		switch {
		case ok:
			return res, nil
		case err != nil:
			n.pool.release(res, err)
			return nil, nil
		}
		held = append(held, res)
	}
	return nil, nil
}

// serverTries is how many connections of n a read tries to find a server
// it needs: one where every connection reaches the same server; behind an
// endpoint a few, never all the pool's (a borrow would wait for one held).
func (r *router) serverTries(n *node) int {
	if !n.endpoint.Load() {
		return 1
	}
	return max(1, min(maxServerTries, r.cfg.MaxConnsPerHost-1))
}

// maxServerTries bounds the connections a read holds at once to find one
// server behind an endpoint.
const maxServerTries = 4

// acquireAnother borrows a connection of n while the read holds i others:
// the first as any borrow; the next ones only within ConnectTimeout (new
// connections, dialled through the address's round robin).
func (r *router) acquireAnother(ctx context.Context, n *node, i int) (*puddle.Resource[*physical], error) {
	if i == 0 {
		return n.pool.acquireRead(ctx)
	}
	actx, cancel := context.WithTimeout(ctx, r.cfg.ConnectTimeout)
	defer cancel()
	return n.pool.acquireRead(actx)
}

// A primary that refuses connections for a moment — its pooler or proxy
// restarting, a fast restart of the server — is waited for: a statement
// that was never sent is safe to hold, write or read, and sending it when
// the primary answers again is what the caller wanted. The wait lasts
// ConnectTimeout at most, never past the caller's deadline, and asks the
// monitor for a probe every primaryRetry, so the primary is found as soon
// as it answers, whatever the monitor's backoff. It applies only while the
// host last known as the primary is down: a cluster with no primary at all
// (every host a replica, split brain) answers at once.
