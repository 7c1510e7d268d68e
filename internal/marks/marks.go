// Package marks keeps the process's write positions per cluster: the
// tickets writes take, the one capture of the primary's position shared
// at a time, and what a capture or a probe of the primary covers.
//
// A write does not read its own LSN: that would cost the primary a
// statement per write. It takes a ticket when it has committed; a capture
// (one SELECT of the primary's flush or insert position) covers every
// ticket issued before it was sent, because every such commit was durable
// and visible before the capture ran. Captures run on demand, when an
// operation needs a position that is still pending (a read that must see
// the write on a replica, a Session's Token), and the monitor's probe of
// the primary covers the rest for free: a process whose writes nobody
// reads back pays the primary no statement for them. Once a Session is
// used, captures also run in the background shortly after writes, one at
// a time, each covering all the writes since the last. Reads of a session
// on the primary take tickets too: a capture after the read bounds what it
// saw.
//
// There are two watermarks. All covers every write: reads without a
// requirement must see it. Shared covers the writes made without a
// Session (migrations, start-up and background work): every read of the
// process that needs a position must see those too, a Session's included,
// so a request never misses a table the process created before it. A
// write made with a Session raises only All: other sessions need not wait
// for it, which keeps session reads on replicas under heavy write load.
//
// Positions are uint64 LSNs. Every statement reads the marks (Snapshot,
// Covered, All): those are plain atomic loads, small enough to inline.
package marks

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgreplica/pgreplica/internal/probe"
)

// Capturer reads the primary's position for a capture: a handle on the
// cluster. It is called once per capture, which is a round trip itself.
type Capturer interface {
	// Capture reads the primary's flush position, or its insert
	// position when insert is set (a covered commit may have been
	// asynchronous).
	Capture(ctx context.Context, insert bool) (uint64, error)
	// KnowsPrimary reports whether the capturer knows a primary now;
	// Closed whether it was closed.
	KnowsPrimary() bool
	Closed() bool
	// Captured is told of each capture run for a Resolve it called (it
	// counts them).
	Captured()
}

// process holds every cluster's marks for the whole process, keyed by
// system identifier: the guarantee is process-wide. (Clusters cloned from
// one another share a system identifier; their marks merge, which is
// safe: reads may wait or fall back more.)
var process sync.Map // system identifier → *Cluster

// Of returns the process marks of cluster sysid.
func Of(sysid uint64) *Cluster {
	v, _ := process.LoadOrStore(sysid, new(Cluster))
	return v.(*Cluster)
}

// Cluster are a cluster's process watermarks and the deferred reading of
// write positions (see the package comment). The zero value is ready: a
// handle keeps one of its own while its cluster is unknown.
type Cluster struct {
	all, shared atomic.Uint64 // LSNs
	// issued counts tickets; writeIssued is the highest ticket of a
	// write, sharedIssued of a write made without a Session, asyncIssued
	// of an operation that may have seen an asynchronous commit (whose
	// commit is visible before it is flushed: a capture covering it reads
	// the insert position); covered the highest ticket whose position is
	// in all (and, if shared, in shared).
	issued, writeIssued, sharedIssued, asyncIssued, covered atomic.Uint64
	// writeAt is when the latest write ticket was issued (unix ns).
	writeAt atomic.Int64
	// capturer points at the Capturer that wrote last: it runs captures
	// for capturers that know no primary (CapturerFor).
	capturer atomic.Pointer[Capturer]
	// sessions is set once a statement with a Session ran on the
	// cluster in this process (BeginSessions).
	sessions atomic.Bool

	mu      sync.Mutex
	running bool
	done    chan struct{} // closed when the running capture ends
	start   uint64        // the tickets the running capture covers
}

// Snapshot is a cluster's watermarks as plain values: the positions known
// and whether writes are still pending.
type Snapshot struct {
	All, Shared uint64
	// PendingAll and PendingShared are the highest uncovered tickets (0:
	// none) of all writes and of writes without a Session.
	PendingAll, PendingShared uint64
	// WriteAt is when the latest write committed, in unix ns (0: none
	// yet); it matters while PendingAll is set.
	WriteAt int64
}

// Snapshot reads the marks. Every statement calls it: it stays small
// enough to inline.
func (m *Cluster) Snapshot() Snapshot {
	covered := m.covered.Load() // first: the positions are at least as new
	p := Snapshot{All: m.all.Load(), Shared: m.shared.Load(),
		PendingAll: m.writeIssued.Load(), PendingShared: m.sharedIssued.Load(), WriteAt: m.writeAt.Load()}
	if p.PendingAll <= covered {
		p.PendingAll = 0
	}
	if p.PendingShared <= covered {
		p.PendingShared = 0
	}
	return p
}

// All is the position every write covered so far reached.
func (m *Cluster) All() uint64 { return m.all.Load() }

// Shared is the position the writes made without a Session covered so far
// reached.
func (m *Cluster) Shared() uint64 { return m.shared.Load() }

// Covered is the highest ticket whose position is in All.
func (m *Cluster) Covered() uint64 { return m.covered.Load() }

// Issued is the latest ticket issued.
func (m *Cluster) Issued() uint64 { return m.issued.Load() }

// PendingWrites reports whether a write's ticket is not covered yet.
func (m *Cluster) PendingWrites() bool { return m.covered.Load() < m.writeIssued.Load() }

// PendingShared is the highest uncovered ticket of a write made without a
// Session, 0 if there is none.
func (m *Cluster) PendingShared() uint64 {
	if s := m.sharedIssued.Load(); s > m.covered.Load() {
		return s
	}
	return 0
}

// Issue hands out a ticket for an operation that has completed: a write
// (shared when made without a Session) or a session's read on the
// primary. async marks one that may have committed, or seen, an
// asynchronous commit.
func (m *Cluster) Issue(write, shared, async bool) uint64 {
	t := m.issued.Add(1)
	if async {
		Max(&m.asyncIssued, t)
	}
	if write {
		m.writeAt.Store(time.Now().UnixNano())
		Max(&m.writeIssued, t)
	}
	if shared {
		Max(&m.sharedIssued, t)
	}
	return t
}

// Writer returns what the latest writer on the cluster recorded (Wrote),
// nil if none did.
func (m *Cluster) Writer() *Capturer { return m.capturer.Load() }

// Wrote records the Capturer c points at as the latest writer on the
// cluster: the latest writer can read its position (CapturerFor). c is
// the handle's own Capturer, which lives as long as the handle. Every
// write needs it: a write checks Writer first and calls Wrote only when
// it is not the latest writer already, so concurrent writers of one
// handle only read the pointer.
func (m *Cluster) Wrote(c *Capturer) { m.capturer.Store(c) }

// Offer makes the Capturer c points at the cluster's capturer if it has
// none yet (a handle that has just learned its cluster).
func (m *Cluster) Offer(c *Capturer) {
	m.capturer.CompareAndSwap(nil, c)
}

// BeginSessions marks that a statement with a Session ran on the cluster
// and reports whether it is the first to.
func (m *Cluster) BeginSessions() bool {
	return !m.sessions.Load() && m.sessions.CompareAndSwap(false, true)
}

// Sessions reports whether a statement with a Session ran on the cluster.
func (m *Cluster) Sessions() bool { return m.sessions.Load() }

// Raise raises both watermarks to lsn (a position every read must see:
// the primary's at a handle's start).
func (m *Cluster) Raise(lsn uint64) {
	Max(&m.all, lsn)
	Max(&m.shared, lsn)
}

// Merge raises m's watermarks to from's (what a handle wrote before it
// knew the cluster belongs to the cluster's marks).
func (m *Cluster) Merge(from *Cluster) {
	Max(&m.all, from.all.Load())
	Max(&m.shared, from.shared.Load())
}

// Probe is what a probe of the primary may cover: it covers the tickets
// issued before it was sent (Probing, Probed).
type Probe struct {
	m      *Cluster
	ticket uint64
}

// Probing returns what a probe of the primary sent now covers once it
// answers (Probed).
func (m *Cluster) Probing() Probe { return Probe{m: m, ticket: m.issued.Load()} }

// Probed reports the primary's flush position the probe read: it covers
// every ticket issued before the probe was sent, unless one may have seen
// an asynchronous commit (whose position may be past the flush position).
// A zero Probe covers nothing.
func (p Probe) Probed(flushLSN uint64) {
	if p.m == nil || p.m.needsInsertLSN() {
		return
	}
	// pg_current_wal_flush_lsn() is past every synchronous commit
	// that returned before the probe.
	p.m.cover(p.ticket, probe.ReachableLSN(flushLSN))
}

// cover records that every ticket up to ticket is covered by lsn, a
// position of the primary read after they were issued (a monitor probe).
func (m *Cluster) cover(ticket uint64, lsn uint64) {
	if m.covered.Load() >= ticket {
		return
	}
	// The positions first: whoever sees the ticket covered sees them.
	Max(&m.all, lsn)
	if m.sharedIssued.Load() > m.covered.Load() {
		Max(&m.shared, lsn)
	}
	Max(&m.covered, ticket)
}

// needsInsertLSN reports whether a capture covering the tickets after
// covered must read the insert position (see asyncIssued).
func (m *Cluster) needsInsertLSN() bool {
	return m.asyncIssued.Load() > m.covered.Load()
}

// Resolve returns once ticket is covered: it joins the running capture if
// that covers it, or runs one (on CapturerFor(c)). Concurrent callers
// share captures.
func (m *Cluster) Resolve(ctx context.Context, c Capturer, ticket uint64) error {
	for m.covered.Load() < ticket {
		m.mu.Lock()
		if m.covered.Load() >= ticket {
			m.mu.Unlock()
			return nil
		}
		if m.running {
			done := m.done
			m.mu.Unlock()
			select {
			case <-done:
			case <-ctx.Done():
				return ctx.Err()
			}
			continue // covered now, or the next capture is ours to run
		}
		m.running, m.done = true, make(chan struct{})
		m.start = m.issued.Load()
		prev := m.covered.Load()
		m.mu.Unlock()

		lsn, err := m.CapturerFor(c).Capture(ctx, m.needsInsertLSN())

		m.mu.Lock()
		if err == nil {
			lsn = probe.ReachableLSN(lsn)
			Max(&m.all, lsn)
			if m.sharedIssued.Load() > prev {
				Max(&m.shared, lsn)
			}
			Max(&m.covered, m.start)
			c.Captured()
		}
		m.running = false
		close(m.done)
		m.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// CapturerFor returns the capturer a capture for c runs on: c, or, while
// c knows no primary (a handle given only the replicas' addresses), the
// process's latest writer on the cluster, which does: the writes a read
// must see are the process's, whichever handle made them.
func (m *Cluster) CapturerFor(c Capturer) Capturer {
	if c.KnowsPrimary() {
		return c
	}
	if w := m.capturer.Load(); w != nil && !(*w).Closed() && (*w).KnowsPrimary() {
		return *w
	}
	return c
}

// Max raises a to v if v is higher and reports whether it did.
func Max(a *atomic.Uint64, v uint64) bool {
	for {
		cur := a.Load()
		if v <= cur {
			return false
		}
		if a.CompareAndSwap(cur, v) {
			return true
		}
	}
}
