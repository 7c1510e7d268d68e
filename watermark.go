package pgreplica

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgreplica/pgreplica/internal/probe"
)

// The "process" consistency default: a read sees every write any
// connector of this process committed on the same cluster before the read
// started. Two *sql.DB opened on one DSN (an ORM's second handle, a
// migration tool, a test helper) share it, so the watermarks are kept per
// cluster, keyed by system identifier, for the whole process: package
// state beside the driver registration (and the probers, prober.go),
// because the guarantee itself is process-wide. (Clusters cloned from one another
// share a system identifier; their watermarks merge, which is safe: reads
// may wait or fall back more.)
var processWatermarks sync.Map

// system identifier → *clusterMarks

// clusterMarks are a cluster's process watermarks and the deferred reading
// of write positions.
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
// a time, each covering all the writes since the last (see
// sessionsBegin). Reads of a session on the primary take tickets too: a
// capture after the read bounds what it saw.
//
// There are two watermarks. all covers every write: reads without a
// requirement must see it. shared covers the writes made without a
// Session (migrations, start-up and background work): every read of the
// process that needs a position must see those too, a Session's included,
// so a request never misses a table the process created before it. A
// write made with a Session raises only all: other sessions need not wait
// for it, which keeps session reads on replicas under heavy write load.
type clusterMarks struct {
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
	// capturer is the connector that wrote last: it runs captures for
	// connectors that know no primary (capturerFor).
	capturer atomic.Pointer[Connector]
	// sessions is set once a statement with a Session ran on the
	// cluster in this process (sessionsBegin).
	sessions atomic.Bool

	mu      sync.Mutex
	running bool
	done    chan struct{} // closed when the running capture ends
	start   uint64        // the tickets the running capture covers
}

// watermark is a connector's handle on its cluster's marks.
type watermark struct {
	sysid uint64
	marks *clusterMarks
}

// marksOf returns the process watermarks of t's cluster: the ones the
// topology was published with (one pointer away from the topology every
// statement reads), or marksFor's for a topology never published.
func (c *Connector) marksOf(t *topology) *clusterMarks {
	if t.marks != nil {
		return t.marks
	}
	return c.marksFor(t.sysid)
}

// handleMarks is a connector's way to its cluster's marks: the handle it
// caches (Connector.mark, which the hot path reads), the connector's own
// marks for an unknown cluster, and whether its start raised them.
type handleMarks struct {
	mark  *atomic.Pointer[watermark]
	local *clusterMarks
	// capturer is the connector, offered to its clusters' marks to run
	// their captures (capturerFor).
	capturer *Connector
	// startMarked is set once the primary's position at start-up raised
	// the process watermarks (markStart).
	startMarked atomic.Bool
}

// marksFor returns the connector's marks of cluster sysid (handleMarks.marksFor).
func (c *Connector) marksFor(sysid uint64) *clusterMarks { return c.marks.marksFor(sysid) }

// marksFor returns the marks of cluster sysid, caching the handle in the
// connector so the hot path does no map lookup. For an unknown cluster
// (sysid 0: no host answered yet) the connector's own marks stand in.
func (h *handleMarks) marksFor(sysid uint64) *clusterMarks {
	if sysid == 0 {
		return h.local
	}
	if m := h.mark.Load(); m != nil && m.sysid == sysid {
		return m.marks
	}
	m := &watermark{sysid: sysid, marks: clusterMarksOf(sysid)}
	// What this connector wrote before it knew the cluster belongs to it.
	atomicMax(&m.marks.all, h.local.all.Load())
	atomicMax(&m.marks.shared, h.local.shared.Load())
	m.marks.capturer.CompareAndSwap(nil, h.capturer)
	h.mark.Store(m)
	return m.marks
}

// clusterMarksOf returns the process watermarks of cluster sysid.
func clusterMarksOf(sysid uint64) *clusterMarks {
	v, _ := processWatermarks.LoadOrStore(sysid, new(clusterMarks))
	return v.(*clusterMarks)
}

// markStart raises the process watermarks, once per connector, to the
// primary's position at its first answer: a process never reads older
// than the database was when it started. The previous process (a
// migration run, the instance a deploy replaces) may have committed a
// moment ago, and a replica behind that would show a database that never
// existed for anyone who came after. It runs before the topology that
// lets statements through is published (monitor.applyStatus), so the first read
// already needs it; reads that accept staleness do not look at the marks.
func (h *handleMarks) markStart(st *nodeStatus) {
	if st.sysid == 0 || !h.startMarked.CompareAndSwap(false, true) {
		return
	}
	m := h.marksFor(st.sysid)
	l := uint64(reachableLSN(st.lsn))
	atomicMax(&m.all, l)
	atomicMax(&m.shared, l)
}

// processLSNs are a cluster's watermarks as plain values, for decide: the
// positions known and whether writes are still pending.
type processLSNs struct {
	all, shared LSN
	// pendingAll and pendingShared are the highest uncovered tickets (0:
	// none) of all writes and of writes without a Session.
	pendingAll, pendingShared uint64
	// writeAt is when the latest write committed.
	writeAt time.Time
}

// snapshot reads the marks.
func (m *clusterMarks) snapshot() processLSNs {
	covered := m.covered.Load()
	p := processLSNs{all: LSN(m.all.Load()), shared: LSN(m.shared.Load())}
	if w := m.writeIssued.Load(); w > covered {
		p.pendingAll = w
		p.writeAt = time.Unix(0, m.writeAt.Load())
	}
	if s := m.sharedIssued.Load(); s > covered {
		p.pendingShared = s
	}
	return p
}

// issue hands out a ticket for an operation that has completed: a write
// (shared when made without a Session) or a session's read on the
// primary. async marks one that may have committed, or seen, an
// asynchronous commit.
func (m *clusterMarks) issue(write, shared, async bool) uint64 {
	t := m.issued.Add(1)
	if async {
		atomicMax(&m.asyncIssued, t)
	}
	if write {
		m.writeAt.Store(time.Now().UnixNano())
		atomicMax(&m.writeIssued, t)
	}
	if shared {
		atomicMax(&m.sharedIssued, t)
	}
	return t
}

// cover records that every ticket up to ticket is covered by lsn, a
// position of the primary read after they were issued (a monitor probe).
func (m *clusterMarks) cover(ticket uint64, lsn LSN) {
	if m.covered.Load() >= ticket {
		return
	}
	// The positions first: whoever sees the ticket covered sees them.
	atomicMax(&m.all, uint64(lsn))
	if m.sharedIssued.Load() > m.covered.Load() {
		atomicMax(&m.shared, uint64(lsn))
	}
	atomicMax(&m.covered, ticket)
}

// atomicMax raises a to v if v is higher and reports whether it did.
func atomicMax(a *atomic.Uint64, v uint64) bool {
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

// needsInsertLSN reports whether a capture covering the tickets after
// covered must read the insert position (see asyncIssued).
func (m *clusterMarks) needsInsertLSN() bool {
	return m.asyncIssued.Load() > m.covered.Load()
}

// reachableLSN maps an insert position just past a WAL page header back
// to the page boundary, which a replica's replay reaches without waiting
// for the next record (probe.ReachableLSN).
func reachableLSN(l LSN) LSN { return LSN(probe.ReachableLSN(uint64(l))) }
