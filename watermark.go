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
// guarantee itself is process-wide.
var processWatermarks sync.Map // system identifier → *atomic.Uint64

// watermark is a connector's handle on its cluster's process watermark.
type watermark struct {
	sysid uint64
	lsn   *atomic.Uint64
}

// processMark returns the watermark of cluster sysid, caching the handle
// in the connector so the hot path does no map lookup. For an unknown
// cluster (sysid 0: no host answered yet) the connector's own watermark
// stands in.
func (c *Connector) processMark(sysid uint64) *atomic.Uint64 {
	if sysid == 0 {
		return &c.localLSN
	}
	if m := c.mark.Load(); m != nil && m.sysid == sysid {
		return m.lsn
	}
	v, _ := processWatermarks.LoadOrStore(sysid, new(atomic.Uint64))
	m := &watermark{sysid: sysid, lsn: v.(*atomic.Uint64)}
	// What this connector wrote before it knew the cluster belongs to it.
	atomicMax(m.lsn, c.localLSN.Load())
	c.mark.Store(m)
	return m.lsn
}

// processLSNFor returns the process watermark of cluster sysid.
func (c *Connector) processLSNFor(sysid uint64) LSN {
	return LSN(c.processMark(sysid).Load())
}

// raiseProcessLSN raises the process watermark of cluster sysid to lsn.
func (c *Connector) raiseProcessLSN(sysid uint64, lsn LSN) {
	atomicMax(c.processMark(sysid), uint64(lsn))
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
