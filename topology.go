package pgreplica

import (
	"fmt"
	"strings"
	"time"

	"github.com/pgreplica/pgreplica/internal/lagtrack"
	"github.com/pgreplica/pgreplica/internal/monoclock"
)

// topology is one immutable view of the cluster, rebuilt by the monitor
// after every probe and read lock-free by every statement. Everything in
// it is a plain value copied at build time; only the hot-path counters of
// each node (in flight, suspect, replay positions learned from reads) are
// read live, through nodeView.n.
type topology struct {
	nodes   []nodeView // every host, in DSN order
	primary int        // index into nodes; -1 when no host takes writes
	// eligible are the hosts no static filter excludes (a replica of
	// this cluster, healthy): the only ones selection looks at.
	eligible nodeSet
	// writeErr says why there is no primary (wraps ErrNoPrimary or
	// ErrSplitBrain): which hosts failed and why (a *HostError each),
	// which are in recovery.
	writeErr error
	// reachable is false when no host answered; reachErr says why.
	reachable bool
	reachErr  error
	// sysid and timeline identify the cluster: the primary's, or a
	// replica's system identifier when no primary is known (0 = unknown).
	sysid    uint64
	timeline uint32
	// marks are the process watermarks of the cluster, never nil in a
	// topology statements read: set when it is published
	// (monitor.publish), or to the connector's own marks until a cluster
	// is known (newConnector, a change of names).
	marks *clusterMarks
	// primarySeen: this or an earlier published topology had a primary,
	// so one without is a failover's window, which a write waits out
	// (awaitPrimary), not a handle given replicas only (set by publish).
	primarySeen bool
}

// nodeView is one host as the monitor saw it when the topology was built.
type nodeView struct {
	// What selection reads on every statement comes first, in one cache
	// line.
	n *node // the pool and the hot-path counters
	// excluded is why the host may not serve reads at all (a role, health
	// or cluster reason); rejectNone for a replica of this cluster.
	excluded rejection
	lagBytes uint64 // primary position minus this replica's replay position
	lag      time.Duration
	zone     string // the host's (Host.Zone)
	// sent and connSince are the probe's (nodeStatus), on the router's
	// clock, for a session read's bound (plan.affinity).
	sent, connSince monoclock.Time

	status nodeStatus    // copy of the last probe's answer
	probed bool          // false until the first probe answered or failed
	rtt    time.Duration // smoothed probe round trip
	// syncState is this replica's sync_state as the primary reports it.
	syncState string
	// aliasOf is the node that reached the same server under another
	// address of the same name (resolve.go); nil for none.
	aliasOf *node
}

// aliasOf returns the node among before that reached the server v
// reached, under another address of the same name, or nil. The
// same incarnation is the same system identifier, port and postmaster
// start time (to the microsecond): the server sees itself at a different
// address under each (127.0.0.1, ::1), so its address cannot tell. An
// endpoint or a pooler is never an alias: its next connection may reach
// another server.
func aliasOf(before []nodeView, v *nodeView) *node {
	if v.n.pin == "" || v.n.endpoint.Load() || v.n.pooled.Load() || v.status.pooled {
		return nil
	}
	id := v.status.id
	for i := range before {
		o := &before[i]
		if o.n.entry == v.n.entry && o.n.pin != "" && o.aliasOf == nil && o.status.healthy() &&
			!o.n.endpoint.Load() && !o.n.pooled.Load() && !o.status.pooled &&
			o.status.id.sysid == id.sysid && o.status.id.port == id.port && o.status.id.started == id.started {
			return o.n
		}
	}
	return nil
}

// primaryNode returns the primary's view, or nil.
func (t *topology) primaryNode() *nodeView {
	if t.primary < 0 {
		return nil
	}
	return &t.nodes[t.primary]
}

// primaryHost returns the primary's node, or nil.
func (t *topology) primaryHost() *node {
	if p := t.primaryNode(); p != nil {
		return p.n
	}
	return nil
}

// emptyTopology is what a connector holds before the first probe.
func emptyTopology(nodes []*node) *topology {
	t := &topology{primary: -1, writeErr: ErrNoPrimary, nodes: make([]nodeView, len(nodes))}
	for i, n := range nodes {
		t.nodes[i] = nodeView{n: n, excluded: rejectUnprobed, zone: n.host.Zone}
	}
	return t
}

// buildTopology decides roles from the latest status of every node.
// Exactly one primary gets writes. Several hosts out of recovery (a former
// primary back beside a promoted replica) resolve to the one on the highest
// timeline; a tie is split brain and nobody gets writes. lags gives the
// primary's position history for time lag.
func buildTopology(nodes []*node, lags *lagtrack.Tracker) *topology {
	t := &topology{primary: -1, nodes: make([]nodeView, len(nodes))}
	var primaries []int
	// Why there may be no primary: the hosts that failed and their
	// causes, those in recovery, those not probed yet.
	var down []*HostError
	var inRecovery, unprobed []string
	for i, n := range nodes {
		v := &t.nodes[i]
		v.n, v.rtt, v.zone = n, n.rttEWMA(), n.host.Zone
		st := n.status.Load()
		if n.retired.Load() {
			continue // excluded below, counted nowhere
		}
		if st == nil {
			unprobed = append(unprobed, n.name)
			continue
		}
		v.status, v.probed = *st, true
		v.sent, v.connSince = monoclock.Of(st.sent), monoclock.Of(st.connSince)
		if !st.healthy() {
			if st.err != nil {
				down = append(down, newHostError(n.name, st.err))
			}
			continue
		}
		t.reachable = true
		if v.aliasOf = aliasOf(t.nodes[:i], v); v.aliasOf != nil {
			continue // the server counts once, as the node it is an alias of
		}
		if st.role == rolePrimary {
			primaries = append(primaries, i)
		} else {
			inRecovery = append(inRecovery, n.name)
		}
	}
	if !t.reachable {
		t.reachErr = &hostsError{kinds: []error{ErrNoReachableHost}, failed: down, unprobed: unprobed}
	}

	switch len(primaries) {
	case 0:
		t.writeErr = &hostsError{kinds: []error{ErrNoPrimary}, failed: down, inRecovery: inRecovery, unprobed: unprobed}
		if !t.reachable {
			t.writeErr = &hostsError{kinds: []error{ErrNoPrimary, ErrNoReachableHost}, failed: down, unprobed: unprobed}
		}
	case 1:
		t.primary = primaries[0]
	default:
		t.primary, t.writeErr = highestTimeline(t.nodes, primaries)
	}

	if p := t.primaryNode(); p != nil {
		t.sysid, t.timeline = p.status.sysid, p.status.timeline
		lags.Add(p.status.at, uint64(p.status.lsn))
		t.sampleReceived(lags)
	}
	for i := range t.nodes {
		v := &t.nodes[i]
		if t.sysid == 0 && v.probed && v.status.healthy() {
			t.sysid = v.status.sysid // no primary: the replicas still name the cluster
		}
		v.excluded = t.exclusion(i)
		if v.excluded == rejectNone {
			t.eligible.add(i)
		}
		if v.status.role == roleReplica && v.probed {
			t.measureLag(v, lags)
		}
	}
	return t
}

// exclusion says why node i may serve no read at all: the first filters
// of selection, which depend only on the snapshot.
func (t *topology) exclusion(i int) rejection {
	v := &t.nodes[i]
	st := &v.status
	switch {
	case v.n.retired.Load():
		return rejectRetired
	case !v.probed:
		return rejectUnprobed
	case st.err != nil:
		return rejectUnreachable
	case v.aliasOf != nil:
		return rejectAlias
	case st.role == rolePrimary && i != t.primary && t.primary >= 0:
		return rejectSuperseded
	case st.role != roleReplica:
		return rejectNotReplica
	}
	p := t.primaryNode()
	if p == nil {
		return rejectNone
	}
	if st.sysid != p.status.sysid {
		// A replica of another cluster: never route to it.
		return rejectOtherCluster
	}
	if st.timeline != 0 && st.timeline < p.status.timeline {
		// Still on the old timeline after a promotion: it may hold WAL the
		// new primary never had.
		return rejectOldTimeline
	}
	if st.timeline > p.status.timeline {
		// Following a newer timeline than the primary's: a server promoted
		// elsewhere (a demoted member of a failover manager that came back
		// on its own timeline) whose WAL this primary never wrote.
		return rejectNewTimeline
	}
	if st.appName != "" {
		v.syncState = p.status.syncStates[st.appName]
	}
	if p.status.syncHidden() {
		v.syncState = StatusNeedsMonitor
	}
	return rejectNone
}

// sampleReceived adds to the primary's samples what the freshest
// streaming replica had received when it was probed: the primary had
// flushed at least that much then (a WAL sender sends only flushed WAL).
// Busy, the primary is probed about every two seconds (traffic stands in for
// the rest: internal/prober's trafficStandsIn); the replicas' probes, at the busy
// rate, keep the samples time lag is measured with as dense as before,
// at no cost to the primary. A lower bound: the lag they measure can
// only be shorter by what is in flight to the replica.
func (t *topology) sampleReceived(lags *lagtrack.Tracker) {
	var at time.Time
	var received LSN
	for i := range t.nodes {
		v := &t.nodes[i]
		st := &v.status
		if !v.probed || !st.healthy() || st.role != roleReplica || st.sysid != t.sysid || st.timeline != t.timeline ||
			st.receiver != "streaming" && !st.receiverHidden || st.receive <= received {
			continue
		}
		at, received = st.at, st.receive
	}
	if received != 0 {
		lags.AddAtLeast(at, uint64(received))
	}
}

// measureLag sets a replica's lag in bytes and in time, as of the
// replica's own sample (see lagtrack.Tracker): a replica sampled earlier than
// the primary (a slower link, a later probe) is not charged with what the
// primary wrote after its sample.
func (t *topology) measureLag(v *nodeView, lags *lagtrack.Tracker) {
	p := t.primaryNode()
	if p == nil {
		return
	}
	// The primary's position when the replica was sampled: from the
	// tracker, whose samples include captures newer than the primary's
	// last probe (internal/prober's captureStandsIn) and the replicas' received
	// positions (sampleReceived); without one, the probe's.
	primary := p.status.lsn
	if pos, ok := lags.PositionAt(v.status.at); ok {
		primary = LSN(pos)
	}
	if v.status.lsn < primary {
		v.lagBytes = uint64(primary - v.status.lsn)
	}
	if at, ok := lags.PassedAt(uint64(v.status.lsn)); ok {
		v.lag = max(v.status.at.Sub(at), 0)
	}
}

func highestTimeline(nodes []nodeView, primaries []int) (int, error) {
	best := -1
	var bestTL uint32
	tie := false
	names := make([]string, len(primaries))
	for k, i := range primaries {
		tl := nodes[i].status.timeline
		names[k] = fmt.Sprintf("%s (timeline %d)", nodes[i].n.name, tl)
		switch {
		case best < 0 || tl > bestTL:
			best, bestTL, tie = i, tl, false
		case tl == bestTL:
			tie = true
		}
	}
	if tie {
		if one := oneServer(nodes, primaries, bestTL); one >= 0 {
			return one, nil
		}
		return -1, fmt.Errorf("%w: %s", ErrSplitBrain, strings.Join(names, ", "))
	}
	return best, nil
}

// oneServer returns, when every primary on timeline tl is the same
// server reached through several addresses, the one whose connections
// all reach it (not an endpoint), else the first; -1 when they are not
// one server. Behind HAProxy the writer port and, for a moment after a
// promotion, the reader port both reach the new primary: one primary,
// not split brain.
func oneServer(nodes []nodeView, primaries []int, tl uint32) int {
	one := -1
	for _, i := range primaries {
		v := &nodes[i]
		if v.status.timeline != tl {
			continue
		}
		switch {
		case one < 0:
			one = i
		case v.status.id != nodes[one].status.id || v.status.id.sysid == 0:
			return -1
		case nodes[one].n.endpoint.Load() && !v.n.endpoint.Load():
			one = i
		}
	}
	return one
}

// rejection is why a filter kept a node from a read; rejectNone passes.
type rejection uint8

const (
	rejectNone         rejection = iota
	rejectRetired                // its name no longer gives its address
	rejectUnprobed               // not probed yet
	rejectUnreachable            // the last probe failed
	rejectAlias                  // the same server as an earlier address of its name
	rejectSuperseded             // out of recovery beside the primary on a higher timeline
	rejectNotReplica             // the primary, or a host without a role
	rejectOtherCluster           // another system identifier
	rejectOldTimeline            // has not followed the primary's timeline
	rejectNewTimeline            // on a newer timeline than the primary's
	rejectSuspect                // a statement failed on it since the last probe
	rejectTried                  // this read already failed there
	rejectLagTime                // Config.MaxLag
	rejectStale                  // the context's WithMaxStaleness
	rejectBehind                 // not known to have replayed the needed position
	rejectPooledTx               // a transaction that needs a position, behind a pooler (replaycheck.go)
	rejectUnchecked              // a read that cannot check its connection (a hedge), on an endpoint or behind a pooler
)

// running is the number of statements node i runs now.
func (t *topology) running(i int) int64 { return t.nodes[i].n.inflight.Load() }

// candidate returns node i as a Picker sees it (Candidates.At).
func (t *topology) candidate(i int) Candidate {
	v := &t.nodes[i]
	return Candidate{
		Addr: v.n.name, Zone: v.n.host.Zone, LagTime: v.lag, LagBytes: v.lagBytes,
		Replayed: LSN(v.n.replay.Load()), RTT: v.rtt, InFlight: v.n.inflight.Load(),
	}
}
