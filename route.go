package pgreplica

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/puddle/v2"
)

// readPlan is the routing decision for one read.
type readPlan struct {
	kind     readKind
	need     LSN // readPosition: the replay LSN a replica must have
	stale    time.Duration
	fallback Fallback
	session  *Session
}

// planRead combines the statement's class and the context's requirement.
func (c *Connector) planRead(ctx context.Context, t *topology, cls stmtClass) (readPlan, error) {
	req := requirementFrom(ctx)
	pl := readPlan{fallback: req.fallbackOr(c.cfg.Fallback)}
	if cls.hint == hintPrimary || !cls.read && cls.hint != hintReplica {
		pl.kind = readPrimary
		return pl, nil
	}
	kind, need, err := req.decide(t.sysid())
	if err != nil {
		return pl, err
	}
	if kind == readDefault {
		switch c.cfg.DefaultConsistency {
		case ConsistencyPrimary:
			kind = readPrimary
		case ConsistencyEventual:
			kind = readEventual
		default:
			kind, need = readPosition, LSN(c.processLSN.Load())
		}
	}
	pl.kind, pl.need = kind, need
	if req != nil {
		pl.session, pl.stale = req.session, req.maxStaleness
	}
	return pl, nil
}

// acquirePrimary borrows a connection to the primary, or says why there is
// none.
func (c *Connector) acquirePrimary(ctx context.Context) (*puddle.Resource[*physical], error) {
	t := c.topo.Load()
	if t.primary == nil {
		return nil, t.writeErr
	}
	res, err := t.primary.pool.acquire(ctx)
	if err != nil && ctx.Err() == nil && isConnLost(err) {
		// The primary went away since the last probe; the monitor will
		// say so too in a moment. Nothing was sent.
		return nil, fmt.Errorf("%w: %w", ErrNoPrimary, err)
	}
	return res, err
}

// routeQuery runs a query outside any transaction or pin.
func (c *Connector) routeQuery(ctx context.Context, query string, cls stmtClass, args []driver.NamedValue) (driver.Rows, error) {
	if c.readOnlyLearned.has(query) {
		cls = classWrite(cls)
	}
	t := c.topo.Load()
	pl, err := c.planRead(ctx, t, cls)
	if err != nil {
		return nil, err
	}
	if pl.kind == readPrimary {
		if cls.read {
			c.metrics.primaryReads.Add(1)
		}
		return c.queryPrimary(ctx, query, cls, args, false)
	}
	var exclude *node
	for attempt := 0; ; attempt++ {
		res, known, err := c.acquireReplicaMeasured(ctx, t, pl, exclude)
		if err != nil {
			if pl.fallback == FallbackError || ctx.Err() != nil {
				return nil, err
			}
			c.log.DebugContext(ctx, "pgreplica: read falls back to the primary", "err", err)
			c.metrics.fallbackReads.Add(1)
			return c.queryPrimary(ctx, query, cls, args, true)
		}
		p := res.Value()
		rows, err := c.runOn(ctx, p, query, args)
		if err == nil {
			pl.session.advance(known, t.timeline(), t.sysid())
			c.metrics.replicaReads.Add(1)
			c.debugRoute(ctx, p.node, "replica", pl, known)
			return c.releasingRows(ctx, rows, res, pl.session), nil
		}
		p.node.inflight.Add(-1)
		switch {
		case sqlState(err) == stateReadOnlyTx:
			// The classifier thought it a read; the replica disagreed.
			// Remember it and run it where it can run.
			p.node.pool.release(res, nil)
			c.readOnlyLearned.add(query)
			c.metrics.readOnlyRetries.Add(1)
			return c.queryPrimary(ctx, query, classWrite(cls), args, false)
		case attempt == 0 && (isRecoveryConflict(err) || isConnLost(err)):
			// No row reached the caller yet: try once elsewhere.
			if isConnLost(err) {
				p.node.markSuspect(err)
				c.metrics.connLostRetries.Add(1)
			} else {
				c.metrics.conflictRetries.Add(1)
			}
			p.node.pool.release(res, err)
			exclude = p.node
			t = c.topo.Load()
			continue
		}
		p.node.pool.release(res, err)
		return nil, err
	}
}

func classWrite(cls stmtClass) stmtClass {
	cls.read = false
	return cls
}

// isRecoveryConflict reports a replica query cancelled by WAL replay
// ("canceling statement due to conflict with recovery"). Outside a
// transaction a replica raises 40001 for nothing else.
func isRecoveryConflict(err error) bool {
	return sqlState(err) == stateSerialization
}

func (c *Connector) runOn(ctx context.Context, p *physical, query string, args []driver.NamedValue) (driver.Rows, error) {
	if err := convertArgs(p.conn, args); err != nil {
		return nil, err
	}
	p.node.inflight.Add(1)
	return queryInner(ctx, p.conn, query, args)
}

func (c *Connector) releasingRows(ctx context.Context, rows driver.Rows, res *puddle.Resource[*physical], sess *Session) driver.Rows {
	p := res.Value()
	return &routedRows{Rows: rows, onClose: func(err error) {
		if err == nil && sess != nil {
			err = c.advanceAfterRead(ctx, p, sess)
		}
		p.node.inflight.Add(-1)
		p.node.pool.release(res, err)
	}}
}

// advanceAfterRead gives a session monotonic reads. PostgreSQL does not
// say which WAL position a replica's snapshot reflects, so the replay
// position read on the same connection after the read is the bound: the
// snapshot is at or before it. Raising the session to what the replica was
// known to have *before* the read is not enough: the read may have seen
// more, and a later read on a replica between the two would go back in
// time. This costs one small round trip per replica read made with a
// Session (not for tokens, the process default or eventual reads).
func (c *Connector) advanceAfterRead(ctx context.Context, p *physical, sess *Session) error {
	replay, err := currentReplay(context.WithoutCancel(ctx), p)
	if err != nil {
		return err
	}
	p.node.observeReplay(replay)
	t := c.topo.Load()
	sess.advance(replay, t.timeline(), t.sysid())
	return nil
}

// queryPrimary runs a query on the primary; a write's LSN is captured when
// its rows are done. A fallback read holds one of the bounded fallback
// slots while it runs.
func (c *Connector) queryPrimary(ctx context.Context, query string, cls stmtClass, args []driver.NamedValue, fallback bool) (driver.Rows, error) {
	if fallback {
		if err := c.takeFallbackSlot(ctx); err != nil {
			return nil, err
		}
	}
	freeSlot := func() {
		if fallback {
			<-c.fallbackSlots
		}
	}
	var res *puddle.Resource[*physical]
	var rows driver.Rows
	var err error
	for attempt := 0; ; attempt++ {
		res, err = c.acquirePrimary(ctx)
		if err != nil {
			freeSlot()
			return nil, err
		}
		p := res.Value()
		rows, err = c.runOn(ctx, p, query, args)
		if err == nil {
			break
		}
		p.node.inflight.Add(-1)
		p.node.pool.release(res, err)
		if cls.read && attempt == 0 && serverGone(err) && ctx.Err() == nil {
			// A read can be sent again: the connection died with its
			// server (the pool drops its siblings), nothing reached the
			// caller, and the topology may know better by now.
			p.node.markSuspect(err)
			c.metrics.connLostRetries.Add(1)
			continue
		}
		freeSlot()
		if !cls.read {
			err = c.writeFailed(p.node, err)
		}
		return nil, err
	}
	p := res.Value()
	release := func(err error) {
		p.node.inflight.Add(-1)
		p.node.pool.release(res, err)
		freeSlot()
	}
	if cls.read {
		if sess := SessionFrom(ctx); sess != nil {
			// The primary showed the newest data: the session must never
			// read older data afterwards (see advanceAfterPrimaryRead).
			return &routedRows{Rows: rows, onClose: func(err error) {
				if err == nil {
					err = c.advanceAfterPrimaryRead(ctx, p, sess)
				}
				release(err)
			}}, nil
		}
		return &routedRows{Rows: rows, onClose: release}, nil
	}
	return c.captureOnClose(ctx, p, cls, rows, release), nil
}

// advanceAfterPrimaryRead raises a session past what a read on the primary
// could have seen, read on the same connection after the read: the flush
// LSN, or the insert LSN when asynchronous commits are in play (their
// commits are visible before they are flushed). Without it a session that
// fell back to the primary could next read a replica that has its
// watermark but not what the primary showed, and see the row go back in
// time. One small round trip, for reads with a Session only.
func (c *Connector) advanceAfterPrimaryRead(ctx context.Context, p *physical, sess *Session) error {
	async := mayBeAsync(p, stmtClass{}) || p.node.asyncSeen.Load()
	rows, err := queryInner(context.WithoutCancel(ctx), p.conn, lsnSQL(async), nil)
	if err != nil {
		return err
	}
	defer rows.Close()
	v := make([]driver.Value, 1)
	if err := rows.Next(v); err != nil {
		return err
	}
	lsn, err := lsnValue(v[0])
	if err != nil {
		return err
	}
	st := p.node.status.Load()
	sess.advance(reachableLSN(lsn), st.timeline, st.sysid)
	return nil
}

// acquireReplicaMeasured is acquireReplica plus the metrics: wait time of
// position reads, and fallbacks by reason.
func (c *Connector) acquireReplicaMeasured(ctx context.Context, t *topology, pl readPlan, exclude *node) (*puddle.Resource[*physical], LSN, error) {
	tokened := pl.kind == readPosition && pl.need > 0
	start := time.Now()
	res, known, err := c.acquireReplica(ctx, t, pl, exclude)
	if tokened && exclude == nil {
		c.metrics.tokenedReads.Add(1)
		c.metrics.wait.observe(time.Since(start))
	}
	if err != nil {
		var nf *NoFreshReplicaError
		if errors.As(err, &nf) {
			c.metrics.noteFallback(nf.Reason, tokened, pl.fallback == FallbackError)
		}
	}
	return res, known, err
}

// acquireReplica borrows a connection to a replica that satisfies the
// plan, and returns the replay LSN it was known to have before the read.
// A replica whose cached replay LSN already proves it costs no extra round
// trip; otherwise the check runs on the very connection that will run the
// query, retried with backoff across replicas up to the wait budget.
func (c *Connector) acquireReplica(ctx context.Context, t *topology, pl readPlan, exclude *node) (*puddle.Resource[*physical], LSN, error) {
	now := time.Now()
	usable := func(n *node) bool {
		if n == exclude || n.suspect.Load() {
			return false
		}
		switch pl.kind {
		case readStaleness:
			return n.lagTime() <= pl.stale
		case readPosition:
			return true
		}
		return c.withinLagBounds(n, now)
	}
	// A replica we cannot connect to is left out and the next one tried.
	var failed [4]*node
	failedN := 0
	fresh := func(n *node) bool {
		for _, f := range failed[:failedN] {
			if n == f {
				return false
			}
		}
		return usable(n) && LSN(n.replay.Load()) >= pl.need
	}
	for failedN < len(failed) {
		n := c.pickReplica(t, fresh)
		if n == nil {
			break
		}
		known := LSN(n.replay.Load())
		res, err := n.pool.acquire(ctx)
		if err == nil {
			return res, known, nil
		}
		if ctx.Err() != nil {
			return nil, 0, ctx.Err()
		}
		failed[failedN] = n
		failedN++
	}
	if pl.kind != readPosition || pl.need == 0 {
		if pl.fallback == FallbackStale {
			// Accept a stale replica rather than load the primary.
			stale := func(n *node) bool {
				return n != exclude && !n.suspect.Load() && (c.cfg.StaleFallbackLag <= 0 || n.lagTime() <= c.cfg.StaleFallbackLag)
			}
			if n := c.pickReplica(t, stale); n != nil {
				if res, err := n.pool.acquire(ctx); err == nil {
					c.metrics.staleReads.Add(1)
					return res, LSN(n.replay.Load()), nil
				}
			}
		}
		return nil, 0, noReplicaError(t)
	}
	return c.awaitReplica(ctx, pl, usable)
}

// awaitReplica polls replicas (on the connection that will run the query)
// until one has replayed pl.need or the wait budget ends.
func (c *Connector) awaitReplica(ctx context.Context, pl readPlan, usable eligibleFn) (*puddle.Resource[*physical], LSN, error) {
	deadline := time.Now().Add(c.cfg.WaitBudget)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	wctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	backoff := time.Millisecond
	var best LSN
	for {
		t := c.topo.Load()
		candidates := 0
		for _, n := range t.replicas {
			if !usable(n) {
				continue
			}
			candidates++
			res, err := n.pool.acquire(wctx)
			if err != nil {
				continue
			}
			replay, err := currentReplay(wctx, res.Value())
			if err == nil && replay >= pl.need {
				n.observeReplay(replay)
				return res, replay, nil
			}
			n.pool.release(res, err)
			if err == nil {
				n.observeReplay(replay)
				best = max(best, replay)
			}
		}
		if ctx.Err() != nil {
			return nil, 0, ctx.Err()
		}
		if candidates == 0 {
			return nil, 0, noReplicaError(t)
		}
		// The last check starts shortly before the deadline, so that a
		// replica catching up late in the budget still serves the read.
		left := time.Until(deadline) - lastCheckMargin
		if left <= 0 {
			return nil, 0, &NoFreshReplicaError{Reason: ReasonTimeout,
				Detail: fmt.Sprintf("no replica replayed %s within %v (best seen %s)", pl.need, c.cfg.WaitBudget, best)}
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

const replaySQL = "SELECT pg_last_wal_replay_lsn()::text"

func currentReplay(ctx context.Context, p *physical) (LSN, error) {
	rows, err := queryInner(ctx, p.conn, replaySQL, nil)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	v := make([]driver.Value, 1)
	if err := rows.Next(v); err != nil {
		return 0, err
	}
	return lsnValue(v[0])
}

// withinLagBounds applies Config.MaxLag / MaxLagBytes to reads without a
// position requirement.
func (c *Connector) withinLagBounds(n *node, now time.Time) bool {
	if c.cfg.MaxLagBytes > 0 && n.lagBytes.Load() > c.cfg.MaxLagBytes {
		return false
	}
	return c.cfg.MaxLag <= 0 || n.lagTime() <= c.cfg.MaxLag
}

func noReplicaError(t *topology) error {
	why := "no healthy replica within the lag bounds"
	if len(t.replicas) == 0 {
		why = "no healthy replica"
	}
	return &NoFreshReplicaError{Reason: ReasonNoReplica, Detail: why}
}

// NoFreshReplicaError is the error of a read that no replica could serve
// and that was not allowed to fall back to the primary. It matches
// errors.Is(err, ErrNoFreshReplica); Reason is ReasonTimeout or
// ReasonNoReplica.
type NoFreshReplicaError struct {
	Reason string
	Detail string
}

func (e *NoFreshReplicaError) Error() string {
	return ErrNoFreshReplica.Error() + ": " + e.Detail
}

// Is makes errors.Is(err, ErrNoFreshReplica) true.
func (e *NoFreshReplicaError) Is(target error) bool { return target == ErrNoFreshReplica }

// acquireForReadTx picks the connection for a read-only transaction: a
// replica that satisfies the context, checked before BEGIN (under
// REPEATABLE READ the first statement fixes the snapshot, so the check must
// come first), else the fallback.
func (c *Connector) acquireForReadTx(ctx context.Context) (*puddle.Resource[*physical], bool, error) {
	t := c.topo.Load()
	pl, err := c.planRead(ctx, t, stmtClass{read: true})
	if err != nil {
		return nil, false, err
	}
	if pl.kind != readPrimary {
		res, known, err := c.acquireReplicaMeasured(ctx, t, pl, nil)
		if err == nil {
			pl.session.advance(known, t.timeline(), t.sysid())
			return res, true, nil
		}
		if pl.fallback == FallbackError || ctx.Err() != nil {
			return nil, false, err
		}
	}
	res, err := c.acquirePrimary(ctx)
	return res, false, err
}

// writeFailed inspects a failed write: a primary that answers "read-only
// transaction" was demoted, a lost connection may mean failover; both wake
// the monitor at once. A write whose connection broke after it was sent
// has an unknown outcome and is never retried.
func (c *Connector) writeFailed(n *node, err error) error {
	if err == nil {
		return nil
	}
	switch {
	case sqlState(err) == stateReadOnlyTx:
		c.mon.pokeAll() // the primary was demoted: find the new one
	case errors.Is(err, driver.ErrBadConn) && c.cfg.Driver == DriverPq:
		// lib/pq reports a connection that broke after the write was
		// sent as ErrBadConn too, and database/sql would send the write
		// again. (The connection was validated before use, so it broke
		// during this write.) The outcome is unknown; never retry it.
		n.suspect.Store(true)
		c.mon.pokeAll()
		return fmt.Errorf("%w: %v", ErrWriteOutcomeUnknown, err)
	case isConnLost(err):
		n.suspect.Store(true)
		c.mon.pokeAll()
		if !errors.Is(err, driver.ErrBadConn) {
			// pgx reports ErrBadConn only when nothing was sent: that one
			// database/sql may retry safely.
			return fmt.Errorf("%w: %w", ErrWriteOutcomeUnknown, err)
		}
	}
	return err
}

// takeFallbackSlot bounds concurrent fallback reads on the primary: when
// every replica lags in a write burst, sending all reads to the primary at
// once can take it down exactly when it is busiest. A read waits up to the
// wait budget for a slot, then fails with ErrFallbackLimit.
func (c *Connector) takeFallbackSlot(ctx context.Context) error {
	select {
	case c.fallbackSlots <- struct{}{}:
		return nil
	default:
	}
	t := time.NewTimer(c.cfg.WaitBudget)
	defer t.Stop()
	select {
	case c.fallbackSlots <- struct{}{}:
		return nil
	case <-t.C:
		c.metrics.fallbackRejected.Add(1)
		c.warnFallbackStorm()
		return fmt.Errorf("%w: %d reads already fell back to the primary", ErrFallbackLimit, cap(c.fallbackSlots))
	case <-ctx.Done():
		return ctx.Err()
	}
}

// debugRoute logs one read's route at Debug level (never the arguments).
func (c *Connector) debugRoute(ctx context.Context, n *node, route string, pl readPlan, known LSN) {
	if c.log.Enabled(ctx, slog.LevelDebug) {
		c.log.DebugContext(ctx, "pgreplica: read", "host", n.name, "route", route, "need", pl.need, "replayed", known)
	}
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
