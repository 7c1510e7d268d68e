package pgreplica

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// The "process" consistency default: a read sees every write any
// connector of this process committed on the same cluster before the read
// started. Two *sql.DB opened on one DSN (an ORM's second handle, a
// migration tool, a test helper) share it, so the watermarks are kept per
// cluster, keyed by system identifier, for the whole process: the one
// piece of package state besides the driver registration, because the
// guarantee itself is process-wide. (Clusters cloned from one another
// share a system identifier; their watermarks merge, which is safe: reads
// may wait or fall back more.)
var processWatermarks sync.Map // system identifier → *clusterMarks

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
	// readers without a connector of their own (Session.Token).
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

// marksFor returns the marks of cluster sysid, caching the handle in the
// connector so the hot path does no map lookup. For an unknown cluster
// (sysid 0: no host answered yet) the connector's own marks stand in.
func (c *Connector) marksFor(sysid uint64) *clusterMarks {
	if sysid == 0 {
		return &c.localMarks
	}
	if m := c.mark.Load(); m != nil && m.sysid == sysid {
		return m.marks
	}
	v, _ := processWatermarks.LoadOrStore(sysid, new(clusterMarks))
	m := &watermark{sysid: sysid, marks: v.(*clusterMarks)}
	// What this connector wrote before it knew the cluster belongs to it.
	atomicMax(&m.marks.all, c.localMarks.all.Load())
	atomicMax(&m.marks.shared, c.localMarks.shared.Load())
	m.marks.capturer.CompareAndSwap(nil, c)
	c.mark.Store(m)
	return m.marks
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

// needsInsertLSN reports whether a capture covering the tickets after
// covered must read the insert position (see asyncIssued).
func (m *clusterMarks) needsInsertLSN() bool {
	return m.asyncIssued.Load() > m.covered.Load()
}

// resolve returns once ticket is covered: it joins the running capture if
// that covers it, or runs one on c. Concurrent callers share captures.
func (m *clusterMarks) resolve(ctx context.Context, c *Connector, ticket uint64) error {
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

		lsn, err := c.readPrimaryLSN(ctx, m.needsInsertLSN())

		m.mu.Lock()
		if err == nil {
			lsn = reachableLSN(lsn)
			atomicMax(&m.all, uint64(lsn))
			if m.sharedIssued.Load() > prev {
				atomicMax(&m.shared, uint64(lsn))
			}
			atomicMax(&m.covered, m.start)
			c.metrics.lsnCaptures.Add(1)
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

// readPrimaryLSN reads the primary's flush position (the insert position
// when a commit may have been asynchronous) on the primary's probe
// connection (probeconn.go): captures never wait for a pooled connection
// behind the statements they serve, nor take one from them, and cost the
// primary no connection of their own. Only while there is no probe
// connection (before the first probe, after a failed one) does a capture
// open a connection, for itself and for that once.
func (c *Connector) readPrimaryLSN(ctx context.Context, async bool) (LSN, error) {
	t := c.topo.Load()
	pv := t.primaryNode()
	if pv == nil {
		return 0, t.writeErr
	}
	lsn, at, err := pv.n.queryLSNOnProbeConn(ctx, lsnSQL(async), c.cfg.ProbeTimeout)
	if err == nil && !async {
		// The flush position, as a probe reads it: a sample of the lag
		// tracker (the probe it may stand in for would have added one).
		c.primaryLSNs.add(at, lsn)
	}
	if !errors.Is(err, errNoProbeConn) {
		return lsn, err
	}
	c.captureConnMu.Lock()
	defer c.captureConnMu.Unlock()
	if c.captureClosed {
		return 0, ErrClosed
	}
	cctx, cancel := context.WithTimeout(ctx, c.cfg.ConnectTimeout)
	conn, err := pv.n.inner.Connect(cctx)
	cancel()
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	return queryLSN(ctx, conn, lsnSQL(async))
}

// closeCaptureConn stops captures from opening connections (Close), once
// one under way has ended.
func (c *Connector) closeCaptureConn() {
	c.captureConnMu.Lock()
	defer c.captureConnMu.Unlock()
	c.captureClosed = true
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
func (c *Connector) captureSoon(m *clusterMarks) {
	if !c.captureScheduled.CompareAndSwap(false, true) {
		return
	}
	c.captureMu.Lock()
	defer c.captureMu.Unlock()
	if c.closed.Load() {
		return
	}
	c.wg.Add(1) // Close waits for a capture that started
	c.captureTimer = time.AfterFunc(captureDelay, func() {
		defer c.wg.Done()
		c.captureScheduled.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.ConnectTimeout)
		defer cancel()
		if err := m.resolve(ctx, c, m.issued.Load()); err != nil && !c.closed.Load() {
			c.log.Debug("pgreplica: background capture of write positions", "err", err)
		}
	})
}

// flushCaptures reads the positions still pending now, running a
// scheduled background capture at once (Close calls it after marking the
// connector closed, so none is scheduled after it): the writes of a
// closing connector keep their positions for the rest of the process,
// whose other connectors may not reach this primary.
func (c *Connector) flushCaptures() {
	c.captureMu.Lock()
	stopped := c.captureTimer != nil && c.captureTimer.Stop()
	c.captureMu.Unlock()
	if stopped {
		defer c.wg.Done()
		c.captureScheduled.Store(false)
	}
	m := c.marksFor(c.topo.Load().sysid)
	if m.covered.Load() >= m.writeIssued.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(c.cfg.ConnectTimeout, time.Second))
	defer cancel()
	m.resolve(ctx, c, m.issued.Load())
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
