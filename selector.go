package pgreplica

import (
	"math/bits"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// Selection is a chain of small filters over a topology snapshot, in the
// manner of MongoDB's server selection:
//
//	healthy → same cluster and timeline → sync-standby rule → suspect
//	→ lag or staleness bound → replay ≥ needed position → zone → picker
//
// The first filters depend only on the snapshot and run once per build
// (topology.exclusion); the others run per read (plan.reject). Each names
// its rejection, so Nodes() and `pgreplica status` explain a host with the
// same code that routes. Nothing here locks or allocates.

// rejection is why a filter kept a node from a read; rejectNone passes.
type rejection uint8

const (
	rejectNone         rejection = iota
	rejectUnprobed               // not probed yet
	rejectUnreachable            // the last probe failed
	rejectSuperseded             // out of recovery beside the primary on a higher timeline
	rejectNotReplica             // the primary, or a host without a role
	rejectOtherCluster           // another system identifier
	rejectOldTimeline            // has not followed the primary's timeline
	rejectSyncStandby            // a synchronous standby, excluded by configuration
	rejectSuspect                // a statement failed on it since the last probe
	rejectTried                  // this read already failed there
	rejectLagBytes               // Config.MaxLagBytes
	rejectLagTime                // Config.MaxLag
	rejectStale                  // the context's WithMaxStaleness
	rejectBehind                 // not known to have replayed the needed position
	rejectPooledTx               // a transaction that needs a position, behind a pooler (replaycheck.go)
	rejectUnchecked              // a read that cannot check its connection (a hedge), on an endpoint or behind a pooler
)

// nodeSet is a set of node indexes (Config allows at most maxHosts hosts).
type nodeSet uint64

const maxHosts = 64

func (s nodeSet) has(i int) bool            { return s&(1<<uint(i)) != 0 }
func (s *nodeSet) add(i int)                { *s |= 1 << uint(i) }
func (s nodeSet) len() int                  { return bits.OnesCount64(uint64(s)) }
func (s nodeSet) without(o nodeSet) nodeSet { return s &^ o }

// nth returns the index of the k-th member (k < s.len()).
func (s nodeSet) nth(k int) int {
	for ; k > 0; k-- {
		s &= s - 1 // drop the lowest member
	}
	return bits.TrailingZeros64(uint64(s))
}

// reject runs the per-read filters on one node and returns the first
// rejection. position decides whether the replay filter applies (it does
// not while a read waits for a replica to catch up).
func (pl *plan) reject(v *nodeView, position bool) rejection {
	switch {
	case v.excluded != rejectNone:
		return v.excluded
	case v.n.suspect.Load():
		return rejectSuspect
	case pl.tried.has(v.n.idx):
		return rejectTried
	case pl.maxLagBytes > 0 && v.lagBytes > pl.maxLagBytes:
		return rejectLagBytes
	case pl.maxLag > 0 && v.lag > pl.maxLag:
		if pl.kind == readStaleness {
			return rejectStale
		}
		return rejectLagTime
	case position && LSN(v.n.replay.Load()) < pl.need:
		return rejectBehind
	case pl.tx && pl.need > 0 && v.n.pooled.Load():
		return rejectPooledTx
	case pl.unchecked && pl.need > 0 && v.n.perConnection():
		// Known for the servers seen there: a connection may reach
		// another.
		return rejectUnchecked
	}
	return rejectNone
}

// replicas returns the nodes that pass every filter (the replay filter
// when position is set), the client's zone preferred: when a replica in
// zone qualifies, only those in zone are returned, and the others are not
// looked at (their counters are cache misses).
func (pl *plan) replicas(position bool) nodeSet {
	if pl.zone != "" {
		if local := pl.pass(position, true); local != 0 {
			return local
		}
	}
	return pl.pass(position, false)
}

// pass returns the eligible nodes that pass every filter, only those in
// the plan's zone when inZone is set.
func (pl *plan) pass(position, inZone bool) nodeSet {
	var ok nodeSet
	for set := pl.topo.eligible; set != 0; set &= set - 1 {
		i := set.nth(0)
		v := &pl.topo.nodes[i]
		if inZone && v.zone != pl.zone || pl.reject(v, position) != rejectNone {
			continue
		}
		ok.add(i)
	}
	return ok
}

// Candidate is a replica that satisfies a read, as a Picker sees it.
type Candidate struct {
	Addr     string // host:port
	Zone     string
	LagTime  time.Duration // as of the last probe
	LagBytes uint64
	// Replayed is the highest replay position known for the replica.
	Replayed LSN
	// RTT is the smoothed probe round trip; InFlight the statements
	// running on the replica now.
	RTT      time.Duration
	InFlight int64
}

// Candidates are the replicas a read may use, all equally valid for its
// consistency requirement. Len is at least 1 when a Picker is called.
type Candidates struct {
	t   *topology
	set nodeSet
}

// Len returns the number of candidates.
func (c Candidates) Len() int { return c.set.len() }

// At returns candidate i, 0 ≤ i < Len().
func (c Candidates) At(i int) Candidate {
	v := &c.t.nodes[c.set.nth(i)]
	return Candidate{
		Addr: v.n.name, Zone: v.n.host.Zone, LagTime: v.lag, LagBytes: v.lagBytes,
		Replayed: LSN(v.n.replay.Load()), RTT: v.rtt, InFlight: v.n.inflight.Load(),
	}
}

// Picker chooses the replica for one read. Pick returns an index in
// [0, c.Len()); anything else means the first candidate. It runs on every
// replica read with more than one candidate (one needs no choice),
// concurrently: it must be fast and safe for concurrent use.
// Config.Picker takes one; the built-in policies (Config.Policy) are
// Pickers too.
type Picker interface {
	Pick(c Candidates) int
}

// PickerFunc adapts a function to Picker.
type PickerFunc func(Candidates) int

// Pick calls f.
func (f PickerFunc) Pick(c Candidates) int { return f(c) }

// choose picks a node of set with the connector's Picker, which is not
// read when there is one candidate (it is a cache line away).
func (c *Connector) choose(t *topology, set nodeSet) int {
	if set&(set-1) == 0 {
		return set.nth(0)
	}
	return pick(c.picker, t, set)
}

// pick applies p to the set and returns a node index.
func pick(p Picker, t *topology, set nodeSet) int {
	c := Candidates{t: t, set: set}
	k := p.Pick(c)
	if k < 0 || k >= set.len() {
		k = 0
	}
	return set.nth(k)
}

// newPicker returns the built-in Picker of a policy.
func newPicker(p Policy) Picker {
	switch p {
	case PolicyRandom:
		return PickerFunc(func(c Candidates) int { return rand.IntN(c.Len()) })
	case PolicyLeastLag:
		return PickerFunc(pickLeastLag)
	case PolicyLatency:
		return PickerFunc(pickLatency)
	}
	return new(roundRobin)
}

// roundRobin spreads reads evenly.
type roundRobin struct{ next atomic.Uint64 }

func (r *roundRobin) Pick(c Candidates) int { return int(r.next.Add(1) % uint64(c.Len())) }

// pickLeastLag takes the least time lag; replay positions break ties
// (they are cached at different moments, so alone they can mislead).
func pickLeastLag(c Candidates) int {
	best, bc := 0, c.At(0)
	for i := 1; i < c.Len(); i++ {
		x := c.At(i)
		if x.LagTime < bc.LagTime || x.LagTime == bc.LagTime && x.Replayed > bc.Replayed {
			best, bc = i, x
		}
	}
	return best
}

// localThreshold is the latency window, as in MongoDB's server selection:
// replicas whose round trip is within it of the fastest are equivalent.
const localThreshold = 15 * time.Millisecond

// pickLatency keeps replicas within localThreshold of the fastest (EWMA
// round trip) and takes the less busy of two random ones.
func pickLatency(c Candidates) int {
	fastest := c.At(0).RTT
	for i := 1; i < c.Len(); i++ {
		fastest = min(fastest, c.At(i).RTT)
	}
	window := func(start int) int {
		for k := range c.Len() {
			if i := (start + k) % c.Len(); c.At(i).RTT <= fastest+localThreshold {
				return i
			}
		}
		return 0
	}
	a, b := window(rand.IntN(c.Len())), window(rand.IntN(c.Len()))
	if c.At(b).InFlight < c.At(a).InFlight {
		return b
	}
	return a
}
