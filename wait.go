package pgreplica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/puddle/v2"

	"github.com/pgreplica/pgreplica/internal/monoclock"
)

// Waiting and falling back: a read for the position of a write not read
// yet (readAfterWrite), for a replica to replay what it needs (futile
// says whether it can in time, awaitReplica polls), and any statement for
// a primary that refuses connections for a moment (awaitPrimary); a read
// no replica could serve goes to the primary, within the bound on
// concurrent fallback reads (fallBack, fallbackGate).

// readAfterWrite handles a read that needs a write whose position is not
// read yet (pl.pending). With ReadAfterWritePrimary, when no replica is
// predicted to answer it as soon as the primary (replicasLate), it takes
// the primary at once if a fallback slot is free (ok). Otherwise it reads
// the position (sharing the statement with concurrent readers and the
// background capture, which a loaded machine may have delayed) and lets
// the read look for a replica that has it. A read that can carry its
// replay check in its own flight (beside) does not wait for the
// position: it is read on the primary while the read flies to a replica,
// and the check compares the two (laterPos), so the read takes one round
// trip, not two.
func (c *Connector) readAfterWrite(ctx context.Context, pl *plan, beside bool) (l lease, ok bool, err error) {
	m := c.marksOf(pl.topo)
	if m.covered.Load() < pl.pending {
		if c.replicasLate(pl, beside) {
			if l, ok := c.recentWriteOnPrimary(ctx, pl); ok {
				return l, true, nil
			}
		}
		if beside {
			pl.later = c.readBeside(ctx, m, pl.pending, pl.waitDeadline(ctx))
			pl.need = max(pl.need, LSN(m.all.Load()))
			pl.pending, pl.fresh = 0, 0
			return lease{}, false, nil
		}
		if err := c.resolveUntil(ctx, m, pl.pending, pl.waitDeadline(ctx)); err != nil {
			if ctx.Err() != nil {
				return lease{}, false, ctx.Err()
			}
			// The position cannot be read (no primary during a failover):
			// no replica can be proven to have the write.
			pl.fresh, pl.need = 0, ^LSN(0)>>1
			return lease{}, false, nil
		}
	}
	// Covered: the marks hold a position at or past the write's.
	pl.need = max(pl.need, LSN(m.all.Load()))
	pl.pending = 0
	pl.fresh = pl.replicas(true)
	return lease{}, false, nil
}

// recentWriteOnPrimary serves on the primary a read that needs a write
// of its process or session whose position was not known when it was
// planned (pl.pendingWriteAt), under ReadAfterWritePrimary, when a
// fallback slot is free (ok): the replicas are predicted to have the
// write later than the primary would answer (replicasLate), or those
// predicted to have it did not (the checks in the read's two flights
// found them behind). Waiting for a replica then costs a replay check at
// least, and a sleep between checks, where the primary costs one round
// trip.
func (c *Connector) recentWriteOnPrimary(ctx context.Context, pl *plan) (lease, bool) {
	if pl.pendingWriteAt.IsZero() || c.cfg.ReadAfterWrite != ReadAfterWritePrimary || pl.fallback == FallbackError || !c.fallbacks.tryTake() {
		return lease{}, false
	}
	l, err := c.leasePrimary(ctx, pl.topo, true)
	if err != nil {
		c.fallbacks.release() // no primary now: prove a replica fresh
		return lease{}, false
	}
	c.metrics.recentWriteReads.Add(1)
	return l, true
}

// laterPos is a write's position read on the primary beside the flight
// of a read that needs it (readAfterWrite).
type laterPos struct {
	done chan struct{}
	err  error
	m    *clusterMarks
}

// readBeside starts reading the position of ticket, as resolveUntil does,
// while the caller sends its read.
func (c *Connector) readBeside(ctx context.Context, m *clusterMarks, ticket uint64, deadline time.Time) *laterPos {
	lp := &laterPos{done: make(chan struct{}), m: m}
	go func() {
		defer close(lp.done)
		lp.err = c.resolveUntil(ctx, m, ticket, deadline)
	}()
	return lp
}

// Wait returns the position once read (pgxroute.Later): the marks, which
// then cover the write.
func (lp *laterPos) Wait() (uint64, bool) {
	<-lp.done
	return lp.m.all.Load(), lp.err == nil
}

// settleLater waits for the position read beside the read's flight and
// makes it the plan's, as readAfterWrite does when it reads it first.
func (c *Connector) settleLater(ctx context.Context, pl *plan) error {
	lp := pl.later
	pl.later = nil
	select {
	case <-lp.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if lp.err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// The position cannot be read (no primary during a failover):
		// no replica can be proven to have the write.
		pl.fresh, pl.need = 0, ^LSN(0)>>1
		return nil
	}
	pl.need = max(pl.need, LSN(lp.m.all.Load()))
	pl.fresh = pl.replicas(true)
	return nil
}

// replicasLate predicts whether a replica would answer a read of the
// pending write later than the primary (ReadAfterWritePrimary sends it
// there then). A read that carries its check in its flight (beside) costs
// a replica's round trip, the write's position being read beside it: it
// is late only when every replica the read may use is predicted to
// replay the write more than a primary round trip from now (the write's
// time plus the replica's measured time lag, never less than its
// recovery_min_apply_delay; a paused one is late). Otherwise the
// position costs a round trip of its own before the read, and a write
// younger than youngWrite is taken to be on no replica yet.
func (c *Connector) replicasLate(pl *plan, beside bool) bool {
	if pl.pendingWriteAt.IsZero() {
		return false // only a session read's bound is pending: resolved, never sent to the primary
	}
	if !beside {
		return time.Since(pl.pendingWriteAt) < youngWrite
	}
	p := pl.topo.primaryNode()
	if p == nil {
		return false
	}
	ahead := p.n.rttEWMA() + time.Since(pl.pendingWriteAt)
	for set := pl.replicas(false); set != 0; set &= set - 1 {
		v := &pl.topo.nodes[set.nth(0)]
		if v.n.endpoint.Load() {
			// An endpoint's lag, pause and apply delay are those of the
			// one server its probe reached (as in futile): another behind
			// it may have the write.
			return false
		}
		if !v.status.paused && max(v.lag, v.status.applyDelay) <= ahead {
			return false // a paused replica replays nothing: late
		}
	}
	return true
}

// youngWrite is the age under which a write is taken to be on no replica
// yet when its position must be read before the read: about when its
// background capture is due. Replication on a fast network takes about
// as long.
const youngWrite = captureDelay

// resolveUntil resolves ticket, trying again while it fails (a failover:
// the new primary may be known in a moment) until deadline.
func (c *Connector) resolveUntil(ctx context.Context, m *clusterMarks, ticket uint64, deadline time.Time) error {
	rctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	for {
		err := m.resolve(rctx, c, ticket)
		if err == nil || rctx.Err() != nil {
			return err
		}
		select {
		case <-c.mon.changedCh():
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
func (c *Connector) futile(ctx context.Context, pl *plan) (futile, paused bool) {
	deadline := pl.waitDeadline(ctx)
	now := time.Now()
	passed, ok := c.primaryLSNs.PassedAt(uint64(pl.need))
	if !ok {
		passed = now // the primary reached it after its last sample
	}
	for set := pl.replicas(false); set != 0; set &= set - 1 {
		v := &pl.topo.nodes[set.nth(0)]
		if v.n.endpoint.Load() {
			// An endpoint's lag, pause and apply delay are those of the
			// one server its probe reached: another behind it may serve
			// the read.
			return false, false
		}
		if v.status.paused && LSN(v.n.replay.Load()) < pl.need {
			paused = true
			continue // cannot serve it: a paused replica proves nothing of the others
		}
		ready := passed.Add(v.status.applyDelay)
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
func (c *Connector) awaitReplica(ctx context.Context, pl *plan) (lease, error) {
	wctx, cancel := context.WithDeadline(ctx, pl.waitDeadline(ctx))
	defer cancel()
	backoff := time.Millisecond
	var best LSN
	for {
		if pl.replicas(false) == 0 {
			return lease{}, noReplicaError(pl)
		}
		if l, ok := c.checkReplicas(wctx, pl, &best); ok {
			return l, nil
		}
		if ctx.Err() != nil {
			return lease{}, ctx.Err()
		}
		// The last check starts shortly before the deadline, so that a
		// replica catching up late in the budget still serves the read.
		left := time.Until(pl.deadline) - lastCheckMargin
		if left <= 0 {
			return lease{}, &NoFreshReplicaError{Reason: ReasonTimeout,
				Detail: fmt.Sprintf("no replica replayed %s before the wait budget ran out (best seen %s)", pl.need, best)}
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
func (c *Connector) checkReplicas(ctx context.Context, pl *plan, best *LSN) (lease, bool) {
	for set := pl.replicas(false); set != 0; set &= set - 1 {
		if l, ok := c.checkNode(ctx, pl, pl.topo.nodes[set.nth(0)].n, best); ok {
			return l, true
		}
	}
	return lease{}, false
}

// checkNode checks replica n's replay on a connection of its and leases
// that connection when it has replayed what the plan needs. Behind an
// endpoint each connection may reach another server: one found behind is
// held while a few more are tried (serverTries), so that the next borrow
// does not hand back the same one.
func (c *Connector) checkNode(ctx context.Context, pl *plan, n *node, best *LSN) (lease, bool) {
	var inTx bool
	res, _ := c.onServers(ctx, n, func(p *physical) (bool, error) {
		c.metrics.replayChecks.Add(1)
		replay, tx, err := checkReplay(ctx, p)
		if err == nil {
			n.observeOn(p.srv, replay)
			if best != nil {
				*best = max(*best, replay)
			}
			if replay >= max(pl.need, c.needOn(pl, n)) {
				inTx = tx
				return true, nil
			}
		}
		if tx {
			err = endCheckTx(p, c.cfg.ProbeTimeout)
		}
		return false, err
	})
	if res == nil {
		return lease{}, false
	}
	res.Value().lent = monoclock.Now() // the read starts after the check
	l := c.newLease(res, true, false)
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
func (c *Connector) onServers(ctx context.Context, n *node, accept func(p *physical) (bool, error)) (*puddle.Resource[*physical], error) {
	var held []*puddle.Resource[*physical]
	defer func() {
		for _, res := range held {
			n.pool.release(res, nil)
		}
	}()
	for i := range c.serverTries(n) {
		res, err := c.acquireAnother(ctx, n, i)
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
func (c *Connector) serverTries(n *node) int {
	if !n.endpoint.Load() {
		return 1
	}
	return max(1, min(maxServerTries, c.cfg.MaxConnsPerHost-1))
}

// maxServerTries bounds the connections a read holds at once to find one
// server behind an endpoint.
const maxServerTries = 4

// acquireAnother borrows a connection of n while the read holds i others:
// the first as any borrow; the next ones only within ConnectTimeout (new
// connections, dialled through the address's round robin).
func (c *Connector) acquireAnother(ctx context.Context, n *node, i int) (*puddle.Resource[*physical], error) {
	if i == 0 {
		return n.pool.acquire(ctx)
	}
	actx, cancel := context.WithTimeout(ctx, c.cfg.ConnectTimeout)
	defer cancel()
	return n.pool.acquire(actx)
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

// primaryRetry is how often a statement waiting for its primary asks the
// monitor to look again.
const primaryRetry = 20 * time.Millisecond

// primaryMomentarilyDown reports whether the host last known as the
// primary is the one that fails now (its probe failed, or it is suspect),
// with no other host claiming the role.
func (c *Connector) primaryMomentarilyDown(t *topology) bool {
	if t.writeErr != nil && errors.Is(t.writeErr, ErrSplitBrain) {
		return false
	}
	for i := range t.nodes {
		v := &t.nodes[i]
		if v.probed && v.status.role == rolePrimary && (v.status.err != nil || v.n.suspect.Load()) {
			return true
		}
	}
	return false
}

// awaitPrimary waits for the primary, down for a moment, to take a
// connection again (see above); err is why the first borrow failed.
func (c *Connector) awaitPrimary(ctx context.Context, slot bool, err error) (lease, error) {
	deadline := time.Now().Add(c.cfg.ConnectTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	tick := time.NewTicker(primaryRetry)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		c.mon.pokeAll()
		select {
		case <-ctx.Done():
			return lease{}, fmt.Errorf("%w (while waiting for the primary: %w)", err, ctx.Err())
		case <-tick.C:
		case <-c.mon.changedCh():
		}
		t := c.topo.Load()
		switch {
		case t.primaryNode() != nil:
			l, lerr := c.tryLeasePrimary(ctx, t, slot)
			if lerr == nil || !errors.Is(lerr, ErrNoPrimary) {
				return l, lerr
			}
			err = lerr
		case !c.primaryMomentarilyDown(t):
			return lease{}, t.writeErr
		default:
			err = t.writeErr
		}
	}
	return lease{}, err
}

// errConflicts is why a read fell back after replay conflicts (logs).
var errConflicts = errors.New("replay conflicts cancelled the read on the replicas")

// fallBack serves a read on the primary, which no replica could serve
// (why), within the bound on concurrent fallbacks.
func (c *Connector) fallBack(ctx context.Context, pl *plan, why error) (lease, error) {
	c.log.DebugContext(ctx, "pgreplica: read falls back to the primary", "err", why)
	c.metrics.fallbackReads.Add(1)
	if err := c.fallbacks.take(ctx); err != nil {
		return lease{}, err
	}
	l, err := c.leasePrimary(ctx, c.topo.Load(), true) // the latest primary
	if err != nil {
		c.fallbacks.release()
		if errors.Is(err, ErrNoPrimary) {
			// Say why the replicas could not serve it either.
			err = fmt.Errorf("%w, and no primary to fall back to: %w", why, err)
		}
	}
	return l, err
}

// fallbackGate is the connector's part that bounds concurrent fallback
// reads on the primary: when every replica lags in a write burst, sending
// all reads to the primary at once can take it down exactly when it is
// busiest. A read holds one of its slots while it runs there.
type fallbackGate struct {
	slots chan struct{}
	wait  time.Duration // Config.FallbackWait
	// lastStormLog rate-limits the fallback-storm warning (unix ns).
	lastStormLog atomic.Int64
	// The connector's counters (the peak of slots held, the reads
	// refused) and logger.
	metrics *metrics
	log     *slog.Logger
}

// take queues for a slot, in order of arrival (a channel hands a freed
// slot to the longest waiting sender), until ctx's deadline or
// Config.FallbackWait, whichever comes first, then fails with
// ErrFallbackLimit.
func (g *fallbackGate) take(ctx context.Context) error {
	if g.tryTake() {
		return nil
	}
	wait := g.wait
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl))
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case g.slots <- struct{}{}:
		g.noteHeld()
		return nil
	case <-t.C:
		g.metrics.fallbackRejected.Add(1)
		g.warnStorm()
		return fmt.Errorf("%w: all %d fallback slots stayed taken for %v", ErrFallbackLimit, cap(g.slots), wait.Round(time.Millisecond))
	case <-ctx.Done():
		return ctx.Err()
	}
}

// tryTake takes a slot if one is free now.
func (g *fallbackGate) tryTake() bool {
	select {
	case g.slots <- struct{}{}:
		g.noteHeld()
		return true
	default:
		return false
	}
}

// release frees a slot.
func (g *fallbackGate) release() { <-g.slots }

// noteHeld raises the peak of slots held at once (Stats).
func (g *fallbackGate) noteHeld() {
	held := int64(len(g.slots))
	for peak := g.metrics.fallbackPeak.Load(); held > peak; peak = g.metrics.fallbackPeak.Load() {
		if g.metrics.fallbackPeak.CompareAndSwap(peak, held) {
			return
		}
	}
}

// warnStorm logs, at most once a second, that reads are being refused
// because too many already fell back to the primary.
func (g *fallbackGate) warnStorm() {
	now := time.Now().UnixNano()
	last := g.lastStormLog.Load()
	if now-last < int64(time.Second) || !g.lastStormLog.CompareAndSwap(last, now) {
		return
	}
	g.log.Warn("pgreplica: fallback storm: reads refused, the primary already serves the maximum of fallback reads",
		"max_primary_fallbacks", cap(g.slots), "refused_total", g.metrics.fallbackRejected.Load())
}
