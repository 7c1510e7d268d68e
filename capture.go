package pgreplica

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgreplica/pgreplica/internal/pgxtrace"
	"github.com/pgreplica/pgreplica/internal/prober"
	"github.com/pgreplica/pgreplica/internal/stmtclass"
)

// Recording and reading write positions: after every committed write, the
// process watermarks and the plan's session must rise to a position at or
// past the end of its commit record (see lsnSQL), read after the commit.
// The write takes a ticket (wrote; a session's read on the primary too,
// readOnPrimary); the read of the position, the capture, is deferred and
// shared between writes: the marks' Resolve runs one on demand,
// captureSoon in the background, and either covers every ticket issued
// before it (internal/marks). The marks run a capture through a
// marks.Capturer: the connector as a capturing.

// marksFor returns the connector's marks of cluster sysid (handleMarks.marksFor).
func (r *router) marksFor(sysid uint64) *clusterMarks { return r.marks.marksFor(sysid) }

// wrote records a write that committed under pl: it takes a ticket (see
// internal/marks) and hands it to the plan's session as a pending position.
// Nothing is sent now: the caller has its result with the inner driver's
// own round trips and statements. The position is read when a read, a
// token or the monitor's next probe of the primary needs or covers it;
// in a process that uses Sessions, also by a capture in the background
// (sessionsBegin).
func (r *router) wrote(pl *plan, p *physical, async bool) (ticket uint64) {
	m := pl.topo.marks
	t := m.Issue(true, pl.session == nil, async || p.mayCommitAsync(pl.topo, stmtclass.Class{}))
	if me := &r.marks.capturer; m.Writer() != me {
		m.Wrote(me) // the latest writer can read its position
	}
	pl.session.notePending(pl.topo.sysid, pl.topo.timeline, &r.marks, m, t, true)
	if pl.session != nil || m.Sessions() {
		r.captureSoon(m)
	}
	return t
}

// readOnPrimary records that a session read on the primary: a capture
// after the read bounds what it saw (the flush position, or the insert
// position once asynchronous commits were seen: their commits are visible
// before they are flushed). Without it the session could next read a
// replica that has its watermark but not what the primary showed, and see
// the row go back in time.
func (r *router) readOnPrimary(pl *plan, p *physical) {
	if pl.session == nil {
		return
	}
	m := pl.topo.marks
	t := m.Issue(false, false, p.node.asyncSeen.Load() || p.mayCommitAsync(pl.topo, stmtclass.Class{}))
	pl.session.notePending(pl.topo.sysid, pl.topo.timeline, &r.marks, m, t, false)
	r.captureSoon(m)
}

// sessionsBegin runs before every statement with a Session. The first on
// a cluster starts background captures of writes made without one: a
// position read later would be the primary's position then, past the
// Sessions' writes since, and shared (which every Session's read must
// see) would rise past them: each session's reads would wait for the
// others' writes on a lagging replica, or fall back. What such writes left
// pending is read now, before the session's statement runs.
func (r *router) sessionsBegin(ctx context.Context, pl *plan) error {
	m := pl.topo.marks
	if !m.BeginSessions() {
		return nil
	}
	if s := m.PendingShared(); s != 0 {
		start := time.Now()
		if err := m.Resolve(ctx, r.capturing(), s); err != nil && ctx.Err() != nil {
			return waitEnded(ctx, "the position of the writes made without a Session", start)
		} // else still pending: read when needed
	}
	return nil
}

// mayCommitAsync reports whether a write on p may commit asynchronously:
// the session or the statement turned synchronous_commit off, or it is off
// by default for our role and database.
func (p *physical) mayCommitAsync(t *topology, cls stmtclass.Class) bool {
	if p.asyncCommit || cls.AsyncCommit {
		p.node.asyncSeen.Store(true)
		return true
	}
	if i := p.node.idx; i < len(t.nodes) && t.nodes[i].n == p.node {
		return t.nodes[i].status.asyncDefault
	}
	return true // a node the topology no longer has (resolve.go): assume the worst
}

// capturing is the router as the marks' capturer (marks.Capturer):
// the marks run their captures through it, and it counts those it
// resolved (metrics). A conversion, not a copy: the same router.
type capturing router

// capturing returns r as the marks' capturer.
func (r *router) capturing() *capturing { return (*capturing)(r) }

// Capture reads the primary's position (readPrimaryLSN).
func (cp *capturing) Capture(ctx context.Context, insert bool) (uint64, error) {
	lsn, err := (*router)(cp).readPrimaryLSN(ctx, insert)
	return uint64(lsn), err
}

// KnowsPrimary reports whether the connector knows a primary now.
func (cp *capturing) KnowsPrimary() bool { return cp.topo.Load().primaryNode() != nil }

// Closed reports whether the connector was closed.
func (cp *capturing) Closed() bool { return cp.closed.Load() }

// Captured counts a capture run for one of the connector's resolves.
func (cp *capturing) Captured() { cp.metrics.lsnCaptures.Add(1) }

// capturerFor returns the router a capture for r runs on
// (marks.Cluster.CapturerFor): r, or, while r knows no primary, the
// process's latest writer on the cluster.
func (r *router) capturerFor(m *clusterMarks) *router {
	return (*router)(m.CapturerFor(r.capturing()).(*capturing))
}

// readPrimaryLSN reads the primary's flush position (the insert position
// when a commit may have been asynchronous) on the primary's probe
// connection (internal/prober): captures never wait for a pooled connection
// behind the statements they serve, nor take one from them, and cost the
// primary no connection of their own. Only while there is no probe
// connection (before the first probe, after a failed one) does a capture
// open a connection, for itself and for that once.
func (r *router) readPrimaryLSN(ctx context.Context, async bool) (LSN, error) {
	if r.cfg.Pgx != nil {
		ctx = pgxtrace.Own(ctx) // the monitor's statement: see PgxHooks
	}
	t := r.topo.Load()
	pv := t.primaryNode()
	if pv == nil {
		return 0, t.writeErr
	}
	pos, at, err := pv.n.prober.QueryLSN(ctx, lsnSQL(async), r.cfg.knobs.ProbeTimeout)
	lsn := LSN(pos)
	if err == nil && !async {
		// The flush position, as a probe reads it: a sample of the lag
		// tracker (the probe it may stand in for would have added one).
		r.primaryLSNs.Add(at, pos)
	}
	if !errors.Is(err, prober.ErrNoConn) {
		return lsn, err
	}
	r.capture.connMu.Lock()
	defer r.capture.connMu.Unlock()
	if r.capture.closed {
		return 0, ErrClosed
	}
	cctx, cancel := context.WithTimeout(ctx, r.cfg.ConnectTimeout)
	conn, err := pv.n.inner.Connect(cctx)
	cancel()
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	return queryLSN(ctx, conn, lsnSQL(async))
}

// captureDelay is how long after a write the background capture starts:
// long enough that one statement covers the writes of many concurrent
// writers (measured: 1.02 statements per write at 16 writers, 1.05 at
// one; 2 ms gave 1.04 and 1.12 and cost the primary more CPU), short
// enough that a read a few milliseconds later finds the position known;
// a read sooner than that could not find the write on a replica anyway.
const captureDelay = 5 * time.Millisecond

// captureSoon schedules a background capture of m's pending tickets,
// unless one is scheduled already.
func (r *router) captureSoon(m *clusterMarks) {
	if !r.capture.scheduled.CompareAndSwap(false, true) {
		return
	}
	r.capture.mu.Lock()
	defer r.capture.mu.Unlock()
	if r.closed.Load() {
		return
	}
	r.wg.Add(1) // Close waits for a capture that started
	r.capture.timer = time.AfterFunc(captureDelay, func() {
		defer r.wg.Done()
		r.capture.scheduled.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.ConnectTimeout)
		defer cancel()
		if err := m.Resolve(ctx, r.capturing(), m.Issued()); err != nil && !r.closed.Load() {
			r.log.Debug("pgreplica: background capture of write positions", "err", err)
		}
	})
}

// flushCaptures reads the positions still pending now, running a
// scheduled background capture at once (Close calls it after marking the
// connector closed, so none is scheduled after it): the writes of a
// closing connector keep their positions for the rest of the process,
// whose other connectors may not reach this primary.
func (r *router) flushCaptures() {
	if r.capture.stop() {
		defer r.wg.Done()
		r.capture.scheduled.Store(false)
	}
	m := r.marksFor(r.topo.Load().sysid)
	if !m.PendingWrites() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(r.cfg.ConnectTimeout, time.Second))
	defer cancel()
	m.Resolve(ctx, r.capturing(), m.Issued())
}

// capturer is the connector's part that runs its background captures
// (captureSoon: one scheduled at a time) and, while there is no probe
// connection, a capture's own connection (readPrimaryLSN), which Close
// ends (closeConn).
type capturer struct {
	// scheduled, mu and timer: the background capture to come.
	scheduled atomic.Bool
	mu        sync.Mutex
	timer     *time.Timer
	// closed, under connMu, stops captures from opening a connection of
	// their own after Close (readPrimaryLSN).
	connMu sync.Mutex
	closed bool
}

// stop stops the scheduled background capture before it ran, and reports
// whether it did (flushCaptures).
func (cp *capturer) stop() bool {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.timer != nil && cp.timer.Stop()
}

// closeConn stops captures from opening connections (Close), once one
// under way has ended.
func (cp *capturer) closeConn() {
	cp.connMu.Lock()
	defer cp.connMu.Unlock()
	cp.closed = true
}
