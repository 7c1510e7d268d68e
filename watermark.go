package pgreplica

import (
	"sync"
	"sync/atomic"
)

// The "process" consistency default: a read sees every write any
// connector of this process committed on the same cluster before the read
// started. Two *sql.DB opened on one DSN (an ORM's second handle, a
// migration tool, a test helper) share it, so the watermark is kept per
// cluster, keyed by system identifier, for the whole process: the one
// piece of package state besides the driver registration, because the
// guarantee itself is process-wide. (Clusters cloned from one another
// share a system identifier; their watermarks merge, which is safe: reads
// may wait or fall back more.)
//
// Each cluster has two watermarks. all covers every write: reads without
// a requirement must see it. shared covers the writes made without a
// Session (migrations, start-up and background work): every read of the
// process that needs a position must see those too, a Session's included,
// so a request never misses a table the process created before it. A
// write made with a Session raises only all: other sessions need not wait
// for it, which keeps session reads on replicas under heavy write load.
var processWatermarks sync.Map // system identifier → *processMarks

type processMarks struct{ all, shared atomic.Uint64 }

// watermark is a connector's handle on its cluster's process watermarks.
type watermark struct {
	sysid uint64
	marks *processMarks
}

// processMarks returns the watermarks of cluster sysid, caching the
// handle in the connector so the hot path does no map lookup. For an
// unknown cluster (sysid 0: no host answered yet) the connector's own
// watermarks stand in.
func (c *Connector) processMarks(sysid uint64) *processMarks {
	if sysid == 0 {
		return &c.localMarks
	}
	if m := c.mark.Load(); m != nil && m.sysid == sysid {
		return m.marks
	}
	v, _ := processWatermarks.LoadOrStore(sysid, new(processMarks))
	m := &watermark{sysid: sysid, marks: v.(*processMarks)}
	// What this connector wrote before it knew the cluster belongs to it.
	atomicMax(&m.marks.all, c.localMarks.all.Load())
	atomicMax(&m.marks.shared, c.localMarks.shared.Load())
	c.mark.Store(m)
	return m.marks
}

// processLSNs returns the process watermarks of cluster sysid.
func (c *Connector) processLSNs(sysid uint64) processLSNs {
	m := c.processMarks(sysid)
	return processLSNs{all: LSN(m.all.Load()), shared: LSN(m.shared.Load())}
}

// processLSNs are the watermarks as plain values, for decide.
type processLSNs struct{ all, shared LSN }

// raiseProcessLSN records a write's position in the watermarks of cluster
// sysid; shared says it was made without a Session.
func (c *Connector) raiseProcessLSN(sysid uint64, lsn LSN, shared bool) {
	m := c.processMarks(sysid)
	atomicMax(&m.all, uint64(lsn))
	if shared {
		atomicMax(&m.shared, uint64(lsn))
	}
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
