package pgreplica

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// monitor is a connector's side of the probing: each of its nodes takes
// the answers of its address's prober (prober.go), which has a loop of its
// own, so a host that hangs (a black-holed address waiting out its
// connect timeout) never delays what the others report. After every
// answer the monitor rebuilds and publishes the topology.
type monitor struct {
	c       *Connector
	ready   chan struct{} // closed once every node answered or failed (see readyGrace)
	readyMu sync.Once
	started time.Time

	mu      sync.Mutex    // serialises rebuilds
	changed chan struct{} // closed and replaced after every rebuild

	// subscribed is set while run has the nodes subscribed, stopped once
	// it unsubscribed them (both guarded by the connector's membersMu).
	subscribed, stopped bool

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

// run subscribes every node to its prober (prober.go) and returns when
// ctx ends and every node unsubscribed: from then on no answer reaches
// the connector.
func (m *monitor) run(ctx context.Context) {
	m.started = time.Now()
	m.c.membersMu.Lock()
	for _, n := range m.c.nodeList() {
		if !n.retired.Load() {
			n.prober.subscribe(n, m)
		}
	}
	m.subscribed = true // resolve.go subscribes the nodes it adds
	m.c.membersMu.Unlock()
	<-ctx.Done()
	m.c.membersMu.Lock()
	m.subscribed, m.stopped = false, true
	for _, n := range m.c.nodeList() {
		if !n.retired.Load() {
			n.prober.unsubscribe(n)
		}
	}
	m.c.membersMu.Unlock()
}

// apply takes a probe's answer for n (the prober hands it to each of its
// subscribers, under its lock) and publishes the new topology. The answer
// is shared: n gets a copy carrying n's record of the server.
func (m *monitor) apply(n *node, shared *nodeStatus) {
	if shared.seq <= n.applied.Load() {
		return
	}
	st := *shared
	if st.err == nil && st.id != (serverID{}) {
		if st.pooled {
			n.setPooled()
		}
		st.server = n.noteServer(st.id)
	}
	m.c.applyStatus(n, &st)
	n.applied.Store(st.seq)
	n.probes.Add(1)
	m.rebuild()
	n.pool.reap()
}

// idleFor returns how long the connector's pools have lent no connection
// (0: one is lent now, or was since the last look): while no statement
// runs, probes may be rarer. It reads the pools' counters, which every
// statement (of either door) moves when it borrows a connection: the hot
// path records nothing for it.
func (m *monitor) idleFor() time.Duration {
	var lent int64
	inUse := false
	for _, n := range m.c.nodeList() {
		if n.pool == nil {
			continue
		}
		l, u := n.pool.statementStat()
		lent += l
		inUse = inUse || u
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
	t := buildTopology(m.c.nodeList(), &m.c.primaryLSNs, m.c.cfg.ExcludeSyncStandby)
	m.c.publish(t)
	close(m.changed)
	m.changed = make(chan struct{})
	if all || t.primary >= 0 && time.Since(m.started) > readyGrace {
		m.readyMu.Do(func() { close(m.ready) })
	}
}

func (m *monitor) allProbed() bool {
	for _, n := range m.c.nodeList() {
		if n.probes.Load() == 0 && !n.retired.Load() {
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
	for _, n := range m.c.nodeList() {
		n.poke()
	}
}

// refresh pokes every node and waits until each has answered a probe sent
// after the call, so the caller sees a view taken after it. (A probe under
// way when it is called may carry an older answer: it does not count.)
func (m *monitor) refresh(ctx context.Context) error {
	nodes := m.c.nodeList()
	before := make([]uint64, len(nodes))
	for i, n := range nodes {
		before[i] = n.prober.started.Load()
	}
	m.pokeAll()
	for {
		m.mu.Lock()
		ch := m.changed
		m.mu.Unlock()
		done := true
		for i, n := range nodes {
			if n.applied.Load() <= before[i] && !n.retired.Load() {
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
