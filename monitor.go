package pgreplica

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// monitor keeps one probing loop per node, so a host that hangs (a
// black-holed address waiting out its connect timeout) never delays what
// the others report. After every probe it rebuilds and publishes the
// topology.
type monitor struct {
	c       *Connector
	ready   chan struct{} // closed once every node answered or failed (see readyGrace)
	readyMu sync.Once
	started time.Time

	mu      sync.Mutex    // serialises rebuilds
	changed chan struct{} // closed and replaced after every rebuild

	// lent is the pools' count of connections lent when the monitor last
	// looked (idleFor), busyAt when it last saw one lent (unix ns).
	lent, busyAt atomic.Int64
}

// readyGrace is how long the first connection waits for slow hosts once a
// primary is known: a black-holed replica must not hold up start-up for its
// whole connect timeout.
const readyGrace = time.Second

// maxProbeBackoff caps how rarely a failing host is probed.
const maxProbeBackoff = 2 * time.Second

func newMonitor(c *Connector) *monitor {
	return &monitor{c: c, ready: make(chan struct{}), changed: make(chan struct{})}
}

// run starts one loop per node and returns when ctx ends and all stopped.
func (m *monitor) run(ctx context.Context) {
	m.started = time.Now()
	var wg sync.WaitGroup
	for _, n := range m.c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.loop(ctx, n)
		}()
	}
	wg.Wait()
}

func (m *monitor) loop(ctx context.Context, n *node) {
	defer func() {
		n.probeLock.lock(context.Background()) // a capture ends within a probe timeout
		if n.probeConn != nil {
			n.probeConn.Close()
			n.probeConn = nil
		}
		n.probeLock.unlock()
	}()
	var probed time.Time // when the last probe was sent
	poked := true        // the first probe goes at once
	for {
		if poked || !m.captureStandsIn(n, probed) {
			probed = time.Now()
			if !m.probeNode(ctx, n) {
				return
			}
		}

		wait := m.c.cfg.MonitorInterval
		if m.idleFor() >= m.c.cfg.MonitorInterval {
			wait = m.c.cfg.IdleMonitorInterval
		}
		if n.failures > 1 {
			// Banned: probe a failing host less often, up to a cap.
			wait = min(wait<<min(n.failures-1, 10), maxProbeBackoff)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
			poked = false
		case <-n.wakeCh:
			t.Stop()
			poked = true
		}
	}
}

// captureStandsIn reports whether the primary's probe due now may be left
// out: a capture read the primary's position on the probe connection
// within the last interval (statements run, so traffic shows the primary
// answering, and the capture's position is a sample of the lag tracker,
// as the probe's would be), and the last probe was sent less than an
// idle interval ago: role, timeline and the rest are still read that
// often. A poke (a failed statement, a refresh) always probes.
func (m *monitor) captureStandsIn(n *node, probed time.Time) bool {
	prev := n.status.Load()
	if prev == nil || prev.err != nil || prev.role != rolePrimary {
		return false
	}
	now := time.Now()
	at := n.capturedAt.Load()
	return now.Sub(probed) < m.c.cfg.IdleMonitorInterval && at != 0 &&
		time.Duration(now.UnixNano()-at) < m.c.cfg.MonitorInterval
}

// probeNode probes n once and publishes what it found; false: the monitor
// is stopping.
func (m *monitor) probeNode(ctx context.Context, n *node) bool {
	// A probe of the primary reads its position after every write
	// that took a ticket before it was sent: it covers them for free.
	var marks *clusterMarks
	var ticket uint64
	if prev := n.status.Load(); prev != nil && prev.role == rolePrimary && prev.err == nil && prev.sysid != 0 {
		marks = m.c.marksFor(prev.sysid)
		ticket = marks.issued.Load()
	}
	// A probe on the open connection gets ProbeTimeout: a host that
	// stops answering is down that long after the probe was sent. The
	// timeout closes the socket, because lib/pq answers a cancelled
	// context by asking the server to cancel, which a frozen server
	// never does. A capture borrowing the connection is waited for
	// (it too ends within ProbeTimeout).
	if n.probeLock.lock(ctx) != nil {
		return false
	}
	timeout := m.c.cfg.ProbeTimeout
	if n.probeConn == nil {
		timeout += m.c.cfg.ConnectTimeout
	}
	n.probesStarted.Add(1)
	pctx, cancel := context.WithTimeout(ctx, timeout)
	stop := context.AfterFunc(pctx, func() { n.probeSocks.close() })
	st := m.c.probe(pctx, n)
	if !stop() {
		if n.probeConn != nil {
			n.probeConn.Close() // its socket may be closed
			n.probeConn = nil
		}
		if st.err != nil && ctx.Err() == nil {
			st.err = fmt.Errorf("no answer to the probe within %v: %w", timeout, st.err)
		}
	}
	cancel()
	n.probeLock.unlock()
	if marks != nil && st.err == nil && st.role == rolePrimary && !marks.needsInsertLSN() {
		// pg_current_wal_flush_lsn() is past every synchronous commit
		// that returned before the probe.
		marks.cover(ticket, reachableLSN(st.lsn))
	}
	if ctx.Err() != nil {
		return false
	}
	m.c.applyStatus(n, st)
	n.probes.Add(1)
	m.rebuild()
	n.pool.reap()
	return true
}

// idleFor returns how long the connector's pools have lent no connection
// (0: one is lent now, or was since the last look): while no statement
// runs, probes may be rarer. It reads the pools' counters, which every
// statement (of either door) moves when it borrows a connection: the hot
// path records nothing for it.
func (m *monitor) idleFor() time.Duration {
	var lent int64
	inUse := false
	for _, n := range m.c.nodes {
		if n.pool == nil {
			continue
		}
		s := n.pool.pool.Stat()
		lent += s.AcquireCount()
		inUse = inUse || s.AcquiredResources() > 0
	}
	now := time.Now().UnixNano()
	if m.lent.Swap(lent) != lent || inUse {
		m.busyAt.Store(now)
		return 0
	}
	return time.Duration(now - m.busyAt.Load())
}

// rebuild publishes a topology from every node's latest status.
func (m *monitor) rebuild() {
	m.mu.Lock()
	defer m.mu.Unlock()
	// Counted before the build: a probe counts only after its status is
	// stored, so when all have counted, the build sees every status.
	all := m.allProbed()
	t := buildTopology(m.c.nodes, &m.c.primaryLSNs, m.c.cfg.ExcludeSyncStandby)
	m.c.publish(t)
	close(m.changed)
	m.changed = make(chan struct{})
	if all || t.primary >= 0 && time.Since(m.started) > readyGrace {
		m.readyMu.Do(func() { close(m.ready) })
	}
}

func (m *monitor) allProbed() bool {
	for _, n := range m.c.nodes {
		if n.probes.Load() == 0 {
			return false
		}
	}
	return true
}

// changedCh returns a channel closed at the next rebuild of the topology.
func (m *monitor) changedCh() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

// pokeAll asks every node for an early probe (a write failed: maybe a
// failover).
func (m *monitor) pokeAll() {
	for _, n := range m.c.nodes {
		n.poke()
	}
}

// refresh pokes every node and waits until each has answered a probe sent
// after the call, so the caller sees a view taken after it. (A probe under
// way when it is called may carry an older answer: it does not count.)
func (m *monitor) refresh(ctx context.Context) error {
	before := make([]int64, len(m.c.nodes))
	for i, n := range m.c.nodes {
		before[i] = n.probesStarted.Load()
	}
	m.pokeAll()
	for {
		m.mu.Lock()
		ch := m.changed
		m.mu.Unlock()
		done := true
		for i, n := range m.c.nodes {
			if n.probes.Load() <= before[i] {
				done = false
			}
		}
		if done {
			// A node counts its probe before its own rebuild publishes
			// it: build once more, so the view holds every answer.
			m.rebuild()
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
