package pgreplica

import (
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// The Picker a read's replica is chosen by among those that satisfy it
// (selector.go's choose calls it): the interface an application may
// implement, and the built-in policies.

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
	nodes candidateNodes
	set   nodeSet
}

// candidateNodes is what Candidates read a replica's figures from: the
// topology snapshot the read is routed on (topology.candidate). Only
// At asks for a whole Candidate; the default policy asks only whether
// one replica is running anything.
type candidateNodes interface {
	candidate(i int) Candidate
	running(i int) int64
}

// Len returns the number of candidates.
func (c Candidates) Len() int { return c.set.len() }

// At returns candidate i, 0 ≤ i < Len().
func (c Candidates) At(i int) Candidate { return c.nodes.candidate(c.set.nth(i)) }

// idle reports whether candidate i runs no statement now.
func (c Candidates) idle(i int) bool { return c.nodes.running(c.set.nth(i)) == 0 }

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

// turnReads is how many reads a replica's turn lasts.
const turnReads = 16

// roundRobin spreads reads evenly: the replicas take turns of turnReads
// reads, and a read whose turn's replica is busy goes to the next in
// plain rotation. A server that answers reads one after another answers
// each sooner than two that take them alternately (each waits idle,
// and on a loopback machine sleeps, for the other's answer): a process
// reading one at a time pays that on every read; one reading many at
// once finds the turn's replica busy and spreads read by read.
type roundRobin struct{ next atomic.Uint64 }

func (r *roundRobin) Pick(c Candidates) int {
	n := r.next.Add(1)
	if turn := int(n / turnReads % uint64(c.Len())); c.idle(turn) {
		return turn
	}
	return int(n % uint64(c.Len()))
}

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

// Policy names a built-in Picker: how one replica is chosen among those
// that satisfy a read.
type Policy int

// Selection policies.
const (
	PolicyRoundRobin Policy = iota // default: in turns of 16 reads; read by read when the turn's replica is busy
	PolicyRandom
	PolicyLeastLag
	PolicyLatency // EWMA round-trip time window, then power of two choices
)
