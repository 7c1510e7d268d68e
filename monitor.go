package pgreplica

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgreplica/pgreplica/internal/lagtrack"
	"github.com/pgreplica/pgreplica/internal/prober"
)

// monitor is a connector's side of the probing: each of its nodes takes
// the answers of its address's prober (internal/prober; subscriber.go),
// which has a loop of its own, so a host that hangs (a black-holed
// address waiting out its connect timeout) never delays what the others
// report. After every answer the monitor rebuilds and publishes the
// topology.
//
// It is handed what it works on (newMonitor): the connector's nodes and
// the mutex that guards their membership, the topology pointer it
// publishes through, the lag tracker its builds read, the handle's marks,
// its settings and logger. It calls nothing of the connector.
type monitor struct {
	nodes     *atomic.Pointer[[]*node] // the connector's nodes (Connector.nodes)
	membersMu *sync.Mutex              // guards changes of nodes and the subscriptions
	topo      *atomic.Pointer[topology]
	lag       *lagtrack.Tracker
	marks     *handleMarks
	settings  monitorSettings
	log       *slog.Logger
	// warned logs what the role cannot see once (privilege.go).
	warned privilegeWarnings

	ready     chan struct{} // closed once every node answered or failed (see readyGrace)
	readyOnce sync.Once     // closes ready
	started   time.Time

	mu      sync.Mutex    // serialises rebuilds
	changed chan struct{} // closed and replaced after every rebuild

	// subscribed is set while run has the nodes subscribed, stopped once
	// it unsubscribed them (both guarded by membersMu).
	subscribed, stopped bool

	// lent is the pools' count of connections lent when the monitor last
	// looked (idleFor), busyAt when it last saw one lent (unix ns).
	lent, busyAt atomic.Int64
}

// readyGrace is how long the first connection waits for slow hosts once a
// primary is known: a black-holed replica must not hold up start-up for its
// whole connect timeout.
const readyGrace = time.Second

// monitorSettings are the settings of a connector its monitor reads.
type monitorSettings struct {
	// password is redacted from the errors a probe reports.
	password string
	// interval and idleInterval are how often the prober probes while
	// the connector's statements run and while they do not
	// (Config.MonitorInterval, Config.IdleMonitorInterval).
	interval, idleInterval time.Duration
}

func newMonitor(nodes *atomic.Pointer[[]*node], membersMu *sync.Mutex, topo *atomic.Pointer[topology],
	lag *lagtrack.Tracker, marks *handleMarks, settings monitorSettings, log *slog.Logger) *monitor {
	return &monitor{nodes: nodes, membersMu: membersMu, topo: topo, lag: lag, marks: marks, settings: settings, log: log,
		ready: make(chan struct{}), changed: make(chan struct{})}
}

// nodeList returns the nodes routed over now (see Connector.nodes).
func (m *monitor) nodeList() []*node { return *m.nodes.Load() }

// apply takes a probe's answer for n (the prober hands it to each of its
// subscribers, under its lock) and publishes the new topology. The answer
// is shared: n gets a copy carrying n's record of the server.
func (m *monitor) apply(n *node, shared *prober.Status) {
	if shared.Seq <= n.applied.Load() {
		return
	}
	st := nodeStatusOf(shared)
	if st.err == nil && st.id != (serverID{}) {
		if st.pooled {
			n.setPooled()
		}
		st.server = n.noteServer(st.id)
	}
	m.applyStatus(n, &st)
	n.applied.Store(shared.Seq)
	n.probes.Add(1)
	m.rebuild()
	n.pool.reap()
}

// applyStatus records a probe result and logs what changed.
func (m *monitor) applyStatus(n *node, st *nodeStatus) {
	prev := n.status.Load()
	if st.err != nil {
		st.err = nameResolveFailure(n.host.Addr, redactErr(st.err, m.settings.password))
		if prev != nil {
			// Keep the last known role and position for status and
			// metrics ("the primary is down"); the error keeps the node
			// out of routing.
			st.role, st.timeline, st.sysid, st.lsn = prev.role, prev.timeline, prev.sysid, prev.lsn
		}
		n.status.Store(st)
		// A server that comes back may have replayed less than before
		// (crash recovery): forget what we knew.
		n.replay.Store(0)
		if prev == nil || prev.err == nil {
			msg := "pgreplica: host unreachable"
			if errors.Is(st.err, ErrInsufficientPrivilege) {
				msg = "pgreplica: host answers but may not be used"
			}
			m.log.Warn(msg, "host", n.name, "err", st.err)
		}
		return
	}
	m.warned.warn(m.log, st)
	// A rate measured across a pause or a resume says nothing of the
	// replica's speed: only two unpaused samples give one.
	if prev != nil && prev.err == nil && prev.role == roleReplica && st.role == roleReplica && !prev.paused && !st.paused &&
		prev.timeline == st.timeline && st.lsn >= prev.lsn && st.at.After(prev.at) {
		st.replayRate = float64(st.lsn-prev.lsn) / st.at.Sub(prev.at).Seconds()
	}
	n.status.Store(st)
	n.suspect.Store(false)
	if st.rtt > 0 {
		n.observeRTT(st.rtt)
	}
	switch {
	case st.restarted:
		n.replay.Store(0) // it may have come back behind: see node.probe
		m.log.Info("pgreplica: host restarted", "host", n.name, "role", st.role.String())
	case prev == nil || prev.role != st.role || prev.timeline != st.timeline:
		// A new role or timeline invalidates what we knew about replay.
		n.replay.Store(0)
		m.log.Info("pgreplica: host role", "host", n.name, "role", st.role.String(), "timeline", st.timeline)
	case prev.err != nil:
		m.log.Info("pgreplica: host back", "host", n.name, "role", st.role.String())
	}
	if st.role == roleReplica {
		n.observeOn(st.server, st.lsn)
		if st.server != nil && n.endpoint.Load() {
			st.server.sawProbe(st)
		}
	}
	if st.role == rolePrimary {
		m.marks.markStart(st)
	}
}

// publish installs a new topology and logs role-level changes.
func (m *monitor) publish(t *topology) {
	t.marks = m.marks.marksFor(t.sysid)
	t.primarySeen = t.primaryNode() != nil || m.topo.Load().primarySeen // one publisher: no race
	prev := m.topo.Swap(t)
	if prev.primaryHost() != t.primaryHost() {
		if p := t.primaryNode(); p != nil {
			m.log.Info("pgreplica: primary", "host", p.n.name)
		} else if t.writeErr != nil {
			m.log.Error("pgreplica: no writable primary", "err", t.writeErr)
		}
	}
}

// idleFor returns how long the connector's pools have lent no connection
// (0: one is lent now, or was since the last look): while no statement
// runs, probes may be rarer. It reads the pools' counters, which every
// statement (of either door) moves when it borrows a connection: the hot
// path records nothing for it.
func (m *monitor) idleFor() time.Duration {
	var lent int64
	inUse := false
	for _, n := range m.nodeList() {
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
	t := buildTopology(m.nodeList(), m.lag)
	m.publish(t)
	close(m.changed)
	m.changed = make(chan struct{})
	if all || t.primary >= 0 && time.Since(m.started) > readyGrace {
		m.readyOnce.Do(func() { close(m.ready) })
	}
}

func (m *monitor) allProbed() bool {
	for _, n := range m.nodeList() {
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
	for _, n := range m.nodeList() {
		n.poke()
	}
}

// refresh pokes every node and waits until each has answered a probe sent
// after the call, so the caller sees a view taken after it. (A probe under
// way when it is called may carry an older answer: it does not count.)
func (m *monitor) refresh(ctx context.Context) error {
	nodes := m.nodeList()
	before := make([]uint64, len(nodes))
	for i, n := range nodes {
		before[i] = n.prober.Started()
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
