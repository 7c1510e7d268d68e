package pgreplica

import (
	"context"

	"github.com/pgreplica/pgreplica/internal/stmtclass"
)

// Recording a write's position: after every committed write, the process
// watermarks and the plan's session must rise to a position at or past
// the end of its commit record (see lsnSQL), read after the commit. The
// read is deferred and shared between writes (clusterMarks).

// WAL page geometry of every PostgreSQL build we support: 8 kB pages,
// whose first page of a segment carries a long header.
const (
	walPageSize       = 8192
	walShortHeader    = 24 // SizeOfXLogShortPHD
	walLongHeader     = 40 // SizeOfXLogLongPHD
	walMinSegmentSize = 1 << 20
)

// reachableLSN maps an insert position that sits just past a page header
// back to the page boundary. When the last record ended exactly at a page
// end, pg_current_wal_insert_lsn() points past the next page's header, but
// a replica's replay position stops at the boundary and only passes it
// when the next record arrives — on an idle primary, seconds later. The
// bytes in between are a header, not data, so the boundary is as good.
func reachableLSN(l LSN) LSN {
	off := uint64(l) % walPageSize
	switch {
	case off == walShortHeader:
		return l - walShortHeader
	case off == walLongHeader && uint64(l)%walMinSegmentSize == walLongHeader:
		return l - walLongHeader
	}
	return l
}

// mayCommitAsync reports whether a write on p may commit asynchronously:
// the session or the statement turned synchronous_commit off, or it is off
// by default for our role and database.
func (p *physical) mayCommitAsync(t *topology, cls stmtclass.Class) bool {
	if p.asyncCommit || cls.AsyncCommit {
		p.node.asyncSeen.Store(true)
		return true
	}
	return t.nodes[p.node.idx].status.asyncDefault
}

// wrote records a write that committed under pl: it takes a ticket (see
// clusterMarks) and hands it to the plan's session as a pending position.
// Nothing is sent now: the caller has its result with the inner driver's
// own round trips and statements. The position is read when a read, a
// token or the monitor's next probe of the primary needs or covers it;
// in a process that uses Sessions, also by a capture in the background
// (sessionsBegin).
func (c *Connector) wrote(pl *plan, p *physical, async bool) {
	m := c.marksOf(pl.topo)
	t := m.issue(true, pl.session == nil, async || p.mayCommitAsync(pl.topo, stmtclass.Class{}))
	if m.capturer.Load() != c {
		m.capturer.Store(c) // the latest writer can read its position
	}
	pl.session.notePending(pl.topo.sysid, pl.topo.timeline, c, m, t, true)
	if pl.session != nil || m.sessions.Load() {
		c.captureSoon(m)
	}
}

// sessionsBegin runs before every statement with a Session. The first on
// a cluster starts background captures of writes made without one: a
// position read later would be the primary's position then, past the
// Sessions' writes since, and shared (which every Session's read must
// see) would rise past them: each session's reads would wait for the
// others' writes on a lagging replica, or fall back. What such writes left
// pending is read now, before the session's statement runs.
func (c *Connector) sessionsBegin(ctx context.Context, pl *plan) error {
	m := c.marksOf(pl.topo)
	if m.sessions.Load() || !m.sessions.CompareAndSwap(false, true) {
		return nil
	}
	if s := m.sharedIssued.Load(); s > m.covered.Load() {
		if err := m.resolve(ctx, c, s); err != nil && ctx.Err() != nil {
			return ctx.Err()
		} // else still pending: read when needed
	}
	return nil
}

// readOnPrimary records that a session read on the primary: a capture
// after the read bounds what it saw (the flush position, or the insert
// position once asynchronous commits were seen: their commits are visible
// before they are flushed). Without it the session could next read a
// replica that has its watermark but not what the primary showed, and see
// the row go back in time.
func (c *Connector) readOnPrimary(pl *plan, p *physical) {
	if pl.session == nil {
		return
	}
	m := c.marksOf(pl.topo)
	t := m.issue(false, false, p.node.asyncSeen.Load() || p.mayCommitAsync(pl.topo, stmtclass.Class{}))
	pl.session.notePending(pl.topo.sysid, pl.topo.timeline, c, m, t, false)
	c.captureSoon(m)
}
