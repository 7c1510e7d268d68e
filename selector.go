package pgreplica

import (
	"math/rand/v2"
	"time"
)

// eligibleFn reports whether a replica may serve a read.
type eligibleFn func(*node) bool

// pickReplica chooses one replica among those ok accepts, by the
// connector's policy, preferring the client's zone when one is set. It runs
// on every read: no locks, no allocations (the topology snapshot is
// immutable and the counters are atomics).
func (c *Connector) pickReplica(t *topology, ok eligibleFn) *node {
	if c.cfg.Zone != "" {
		if n := c.pickPolicy(t.replicas, func(n *node) bool { return n.host.Zone == c.cfg.Zone && ok(n) }); n != nil {
			return n
		}
	}
	return c.pickPolicy(t.replicas, ok)
}

func (c *Connector) pickPolicy(rs []*node, ok eligibleFn) *node {
	if len(rs) == 0 {
		return nil
	}
	switch c.cfg.Policy {
	case PolicyLeastLag:
		// Least time lag; replay positions break ties (they are cached at
		// different moments, so alone they can mislead).
		var best *node
		for _, n := range rs {
			if !ok(n) {
				continue
			}
			if best == nil || n.lagTime() < best.lagTime() ||
				n.lagTime() == best.lagTime() && n.replay.Load() > best.replay.Load() {
				best = n
			}
		}
		return best
	case PolicyLatency:
		return pickLatency(rs, ok)
	case PolicyRandom:
		return firstFrom(rs, rand.IntN(len(rs)), ok)
	default:
		return firstFrom(rs, int(c.rr.Add(1)%uint64(len(rs))), ok)
	}
}

// firstFrom returns the first acceptable replica starting at index start.
func firstFrom(rs []*node, start int, ok eligibleFn) *node {
	for i := range rs {
		if n := rs[(start+i)%len(rs)]; ok(n) {
			return n
		}
	}
	return nil
}

// localThreshold is the latency window, as in MongoDB's server selection:
// replicas whose round trip is within it of the fastest are equivalent.
const localThreshold = 15 * time.Millisecond

// pickLatency keeps replicas within localThreshold of the fastest (EWMA
// round trip) and takes the less busy of two random ones.
func pickLatency(rs []*node, ok eligibleFn) *node {
	fastest := time.Duration(-1)
	for _, n := range rs {
		if ok(n) {
			if r := n.rttEWMA(); fastest < 0 || r < fastest {
				fastest = r
			}
		}
	}
	if fastest < 0 {
		return nil
	}
	inWindow := func(n *node) bool { return ok(n) && n.rttEWMA() <= fastest+localThreshold }
	a := firstFrom(rs, rand.IntN(len(rs)), inWindow)
	b := firstFrom(rs, rand.IntN(len(rs)), inWindow)
	if b != nil && b.inflight.Load() < a.inflight.Load() {
		return b
	}
	return a
}
