package pgreplica

import (
	"sync/atomic"
	"time"

	"github.com/pgreplica/pgreplica/internal/marks"
	"github.com/pgreplica/pgreplica/internal/probe"
)

// The "process" consistency default: a read sees every write any
// connector of this process committed on the same cluster before the read
// started. Two *sql.DB opened on one DSN (an ORM's second handle, a
// migration tool, a test helper) share it, so the watermarks are kept per
// cluster, keyed by system identifier, for the whole process
// (internal/marks: the tickets, the shared capture and what a capture or
// a probe covers). This file is the handle's side: its cached way to its
// cluster's marks (plan.go reads them as plain values for decide).

// clusterMarks are a cluster's process watermarks (marks.Cluster).
type clusterMarks = marks.Cluster

// watermark is a connector's handle on its cluster's marks.
type watermark struct {
	sysid uint64
	marks *clusterMarks
}

// handleMarks is a connector's way to its cluster's marks: the handle it
// caches (Connector.mark, which the hot path reads), the connector's own
// marks for an unknown cluster, and whether its start raised them.
type handleMarks struct {
	mark  *atomic.Pointer[watermark]
	local *clusterMarks
	// capturer is the connector as its clusters' marks run their
	// captures through it (marks.Cluster.CapturerFor); they keep its
	// address (Wrote, Offer).
	capturer marks.Capturer
	// captureTimeout bounds a capture that no caller's context bounds (a
	// session's pending positions, Session.Token): Config.ConnectTimeout.
	captureTimeout time.Duration
	// startMarked is set once the primary's position at start-up raised
	// the process watermarks (markStart).
	startMarked atomic.Bool
}

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
	m := &watermark{sysid: sysid, marks: marks.Of(sysid)}
	// What this connector wrote before it knew the cluster belongs to it.
	m.marks.Merge(h.local)
	m.marks.Offer(&h.capturer)
	h.mark.Store(m)
	return m.marks
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
	h.marksFor(st.sysid).Raise(uint64(reachableLSN(st.lsn)))
}

// reachableLSN maps an insert position just past a WAL page header back
// to the page boundary, which a replica's replay reaches without waiting
// for the next record (probe.ReachableLSN).
func reachableLSN(l LSN) LSN { return LSN(probe.ReachableLSN(uint64(l))) }
