package pgreplica

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/puddle/v2"

	"github.com/pgreplica/pgreplica/internal/pgxroute"
	"github.com/pgreplica/pgreplica/internal/sqlstate"
	"github.com/pgreplica/pgreplica/internal/stmtclass"
)

// The execution path: everything a plan needs done, once for Exec, Query
// and transactions alike. route is the loop; acquire finds the
// connection (a fresh replica, a wait, the fallback); lease is what the
// caller holds until its statement or transaction is done.

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
	start, answered mono
	// watch gives up on the statement once its context ended (lib/pq
	// only; see deadlineWatch).
	watch *deadlineWatch
	// inTx: the lease began a transaction for its replay check, which
	// ends when it is given back (pooledcheck.go).
	inTx bool
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
		<-c.fallbackSlots
	}
}

// planFor reads the context's requirement and decides into pl (in place:
// a plan is a few hundred bytes, copied on every return); the wait
// deadline is set when a wait needs it (plan.waitDeadline).
func (c *Connector) planFor(ctx context.Context, cls stmtclass.Class, pl *plan) error {
	t := c.topo.Load()
	process := func() processLSNs { return c.marksOf(t).snapshot() }
	if err := pl.decide(t, cls, requirementFrom(ctx), &c.settings, process, time.Time{}, time.Time{}); err != nil {
		return err
	}
	if pl.session != nil {
		return c.sessionsBegin(ctx, pl)
	}
	return nil
}

// statement is what route runs on a leased connection, its args
// converted for that connection's driver first: the caller's op, or,
// without one, the query itself (runQuery), which route may hedge; its
// rows are left in rows. (op is route's own parameter, not a field: what
// a hedge keeps of the statement escapes to the heap, op must not, or
// every statement would allocate its closure and what that captures.)
type statement struct {
	query string // the client's query; for a read a replica refused
	args  []driver.NamedValue
	cls   stmtclass.Class
	rows  driver.Rows
	// hedge is the pgx handle's operation when it may be hedged (route's
	// op then runs it unhedged).
	hedge pgxroute.HedgeOp
	// guard is the pgx handle's operation when it may carry its replay
	// check in its own flight; inFlight says the query itself may
	// (flightread.go). A read whose replica is not known fresh then runs
	// so, once its position is known (acquire).
	guard    pgxroute.GuardedOp
	inFlight bool
}

// route runs st on a connection the plan allows and returns the lease it
// succeeded on. A read that failed before returning anything is sent
// again where it can succeed (retry.go). A query outside a transaction
// whose replica is slow to answer is hedged (hedge.go). A write is never
// sent twice.
func (c *Connector) route(ctx context.Context, pl *plan, st *statement, op func(ctx context.Context, p *physical) error) (lease, error) {
	c.avoidConflicts(pl, st.query)
	for {
		l, ran, err := c.acquire(ctx, pl, st)
		if err != nil || ran {
			return l, err
		}
		c.watchStatement(ctx, &l)
		if err := convertArgs(l.p.conn, st.args); err != nil {
			l.release(nil)
			return lease{}, err
		}
		if pl.read && !l.replica && pl.session != nil {
			if err := c.primaryShowsSession(ctx, pl, l.p); err != nil {
				l.release(err)
				return lease{}, err
			}
		}
		switch {
		case (op == nil || st.hedge != nil) && c.hedgeable(pl, &l):
			l, st.rows, err = c.runHedged(ctx, pl, l, hedgeWork{query: st.query, args: st.args, cls: st.cls, op: st.hedge})
		case op != nil:
			err = op(ctx, l.p)
		default:
			st.rows, err = runQuery(ctx, l.p, st.query, st.args, st.cls)
		}
		if err == nil {
			if l.replica {
				l.observeAnswer()
			}
			c.noteServed(ctx, pl, &l)
			return l, nil
		}
		l.release(err)
		if c.retry(ctx, pl, &l, err, st.query) {
			continue
		}
		if !pl.read {
			err = c.writeFailed(l.p, err)
		}
		return lease{}, err
	}
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
	if pl.pending != 0 {
		if l, ok, err := c.readAfterWrite(ctx, pl); ok || err != nil {
			return l, false, err
		}
		if !pl.at.IsZero() {
			pl.at = time.Now() // the wait for a replica starts now
		}
	}
	if (st.guard != nil || st.inFlight) && pl.unproven() {
		if l, ran, err = c.readInFlight(ctx, pl, st); ran || err != nil {
			return l, ran, err
		}
		if pl.onPrimary || pl.conflicted {
			return c.acquire(ctx, pl, st) // retry sent it to the primary
		}
	}
	first := pl.tried == 0
	l, err = c.leaseReplica(ctx, pl)
	if first && pl.tokened() {
		c.metrics.tokenedReads.Add(1)
		c.metrics.wait.observe(pl.waited())
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

// errConflicts is why a read fell back after replay conflicts (logs).
var errConflicts = errors.New("replay conflicts cancelled the read on the replicas")

// fallBack serves a read on the primary, which no replica could serve
// (why), within the bound on concurrent fallbacks.
func (c *Connector) fallBack(ctx context.Context, pl *plan, why error) (lease, error) {
	c.log.DebugContext(ctx, "pgreplica: read falls back to the primary", "err", why)
	c.metrics.fallbackReads.Add(1)
	if err := c.takeFallbackSlot(ctx); err != nil {
		return lease{}, err
	}
	l, err := c.leasePrimary(ctx, c.topo.Load(), true) // the latest primary
	if err != nil {
		<-c.fallbackSlots
	}
	return l, err
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

func (c *Connector) newLease(res *puddle.Resource[*physical], replica, slot bool) lease {
	p := res.Value()
	p.node.inflight.Add(1)
	return lease{c: c, res: res, p: p, replica: replica, slot: slot, known: p.knownReplay(),
		start: p.lent}
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
	for set := pl.fresh.without(pl.tried); set != 0; set = pl.replicas(true) {
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
		pl.tried.add(i)
	}
	if pl.need > 0 {
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
	return lease{}, noReplicaError(pl)
}

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
		if then, ok := c.primaryLSNs.positionAt(time.Now().Add(-pl.maxLag)); ok {
			need = max(need, then)
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
// position of that replica read after it (on a probe connection open
// since before it), else of the primary read after it, from the snapshot;
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

// readAfterWrite handles a read that needs a write whose position is not
// read yet (pl.pending). For a write younger than youngWrite, with
// ReadAfterWritePrimary, it takes the primary at once when a fallback slot
// is free (ok): no replica can have a write that young. Otherwise it reads
// the position (sharing the statement with concurrent readers and the
// background capture, which a loaded machine may have delayed) and lets
// the read look for a replica that has it.
func (c *Connector) readAfterWrite(ctx context.Context, pl *plan) (l lease, ok bool, err error) {
	m := c.marksOf(pl.topo)
	if m.covered.Load() < pl.pending {
		young := !pl.pendingWriteAt.IsZero() && time.Since(pl.pendingWriteAt) < youngWrite
		if young && c.cfg.ReadAfterWrite == ReadAfterWritePrimary && pl.fallback != FallbackError {
			select {
			case c.fallbackSlots <- struct{}{}:
				c.noteFallbackSlots()
				if l, err := c.leasePrimary(ctx, pl.topo, true); err == nil {
					c.metrics.recentWriteReads.Add(1)
					return l, true, nil
				}
				<-c.fallbackSlots // no primary now: prove a replica fresh
			default:
			}
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

// youngWrite is the age under which a write is taken to be on no replica
// yet: about when its background capture is due. Replication on a fast
// network takes about as long.
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
	passed, ok := c.primaryLSNs.passedAt(pl.need)
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
	var held []*puddle.Resource[*physical]
	defer func() {
		for _, res := range held {
			n.pool.release(res, nil)
		}
	}()
	for i := range c.serverTries(n) {
		res, err := c.acquireAnother(ctx, n, i)
		if err != nil {
			return lease{}, false
		}
		c.metrics.replayChecks.Add(1)
		replay, inTx, err := checkReplay(ctx, res.Value())
		if err == nil {
			n.observeOn(res.Value().srv, replay)
			if best != nil {
				*best = max(*best, replay)
			}
			if replay >= max(pl.need, c.needOn(pl, n)) {
				res.Value().lent = monoNow() // the read starts after the check
				l := c.newLease(res, true, false)
				l.inTx = inTx
				return l, true
			}
		}
		if inTx {
			err = endCheckTx(res.Value(), c.cfg.ProbeTimeout)
		}
		if err != nil {
			n.pool.release(res, err)
			return lease{}, false
		}
		held = append(held, res)
	}
	return lease{}, false
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

// lastCheckMargin is left for the last replay check of a wait: a loopback
// round trip takes well under a millisecond.
const lastCheckMargin = time.Millisecond

func noReplicaError(pl *plan) error {
	why := "no healthy replica within the lag bounds"
	if pl.maxLag == 0 && pl.maxLagBytes == 0 {
		why = "no healthy replica"
	}
	return &NoFreshReplicaError{Reason: ReasonNoReplica, Detail: why}
}

// takeFallbackSlot bounds concurrent fallback reads on the primary: when
// every replica lags in a write burst, sending all reads to the primary at
// once can take it down exactly when it is busiest. A read queues for a
// slot, in order of arrival (a channel hands a freed slot to the longest
// waiting sender), until its context's deadline or Config.FallbackWait,
// whichever comes first, then fails with ErrFallbackLimit.
func (c *Connector) takeFallbackSlot(ctx context.Context) error {
	select {
	case c.fallbackSlots <- struct{}{}:
		c.noteFallbackSlots()
		return nil
	default:
	}
	wait := c.cfg.FallbackWait
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl))
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case c.fallbackSlots <- struct{}{}:
		c.noteFallbackSlots()
		return nil
	case <-t.C:
		c.metrics.fallbackRejected.Add(1)
		c.warnFallbackStorm()
		return fmt.Errorf("%w: all %d fallback slots stayed taken for %v", ErrFallbackLimit, cap(c.fallbackSlots), wait.Round(time.Millisecond))
	case <-ctx.Done():
		return ctx.Err()
	}
}

// noteFallbackSlots raises the peak of slots held at once (Stats).
func (c *Connector) noteFallbackSlots() {
	held := int64(len(c.fallbackSlots))
	for peak := c.metrics.fallbackPeak.Load(); held > peak; peak = c.metrics.fallbackPeak.Load() {
		if c.metrics.fallbackPeak.CompareAndSwap(peak, held) {
			return
		}
	}
}

// noteServed counts a read by where it ran and, for a replica read of a
// session, raises the session to what the replica was known to have.
func (c *Connector) noteServed(ctx context.Context, pl *plan, l *lease) {
	if !pl.read {
		return
	}
	switch {
	case l.replica:
		c.metrics.replicaReads.Add(1)
		pl.session.advance(l.known, pl.topo.timeline, pl.topo.sysid)
	case !l.slot:
		c.metrics.primaryReads.Add(1)
	}
	if c.log.Enabled(ctx, slog.LevelDebug) {
		c.log.DebugContext(ctx, "pgreplica: read", "host", l.p.node.name, "replica", l.replica,
			"fallback", l.slot, "need", pl.need, "replayed", l.known)
	}
}

// finish does what a statement's plan asks once its results are consumed:
// a write through Query is recorded (its position is read later); a read
// of a session leaves what bounds the session's next read. A statement's
// snapshot was taken before its answer came, so the read ended, for the
// bound, when it was answered.
func (c *Connector) finish(pl *plan, l *lease) {
	switch {
	case pl.capture:
		c.wrote(pl, l.p, false)
	case pl.read:
		c.boundRead(pl, l, l.answered)
	}
}

// boundRead records what bounds the next read of the plan's session after
// a read on l that ended at end (zero: now; a transaction's ends when it
// does), nothing to do without a session: the replica and when the read
// ran (see plan.affinity), or a ticket for a read on the primary.
func (c *Connector) boundRead(pl *plan, l *lease, end mono) {
	switch {
	case pl.session == nil:
	case l.replica:
		if end == 0 {
			end = monoNow()
		}
		pl.session.noteReplicaRead(pl.topo.sysid, c, c.marksOf(pl.topo), l.p.node, l.p.servedBy(), l.start, end)
	default:
		c.readOnPrimary(pl, l.p)
	}
}

// observeAnswer notes that l's replica answered now: when (answered) and
// how long it took (for the hedge delay).
func (l *lease) observeAnswer() {
	l.answered = monoNow()
	l.p.node.answers.observe(l.answered.sub(l.start))
}

// writeFailed inspects a failed write: a primary that answers "read-only
// transaction" was demoted, a lost connection may mean failover; both wake
// the monitor at once. A write whose connection broke after it was sent
// has an unknown outcome and is never retried.
func (c *Connector) writeFailed(p *physical, err error) error {
	if err == nil {
		return nil
	}
	switch {
	case sqlstate.Of(err) == sqlstate.ReadOnlyTx:
		c.mon.pokeAll() // the primary was demoted: find the new one
	case sqlstate.ConnLost(err):
		p.node.suspect.Store(true)
		c.mon.pokeAll()
		if !errors.Is(err, driver.ErrBadConn) {
			return fmt.Errorf("%w: %w", ErrWriteOutcomeUnknown, err)
		}
		if p.wire.badConnMaySend() {
			// database/sql sends a statement again on ErrBadConn; this
			// inner driver (lib/pq) also says it when the connection broke
			// after the write was sent. %v, so it is not sent twice.
			return fmt.Errorf("%w: %v", ErrWriteOutcomeUnknown, err)
		}
		// pgx says ErrBadConn only when nothing was sent: database/sql
		// may safely send it again.
	}
	return err
}

// warnFallbackStorm logs, at most once a second, that reads are being
// refused because too many already fell back to the primary.
func (c *Connector) warnFallbackStorm() {
	now := time.Now().UnixNano()
	last := c.lastStormLog.Load()
	if now-last < int64(time.Second) || !c.lastStormLog.CompareAndSwap(last, now) {
		return
	}
	c.log.Warn("pgreplica: fallback storm: reads refused, the primary already serves the maximum of fallback reads",
		"max_primary_fallbacks", cap(c.fallbackSlots), "refused_total", c.metrics.fallbackRejected.Load())
}
