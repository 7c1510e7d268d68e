package pgreplica

import (
	"sync/atomic"
	"time"
)

// statementSet remembers statements the replicas would not serve, so the
// next run of each goes to the primary at once: those a replica refused as
// writes (SQLSTATE 25006, "cannot execute … in a read-only transaction")
// although the classifier took them for reads, kept for good, and those
// that kept conflicting with replay (retry.go), kept for conflictMemory.
// A bounded set of statement texts, read lock-free on every query and
// written rarely (copy on write); when full it starts over: a forgotten
// statement only costs one more retry.
type statementSet struct {
	// any is set once a statement was added: until then (for most
	// applications, always) has reads no map.
	any atomic.Bool
	max int32 // beside any: the set takes 16 bytes of the connector's hot lines
	// m maps a statement to when it is forgotten (0: never).
	m atomic.Pointer[map[string]mono]
}

// conflictMemory is how long a statement that conflicted with replay on
// the replicas goes to the primary: about as long as a long report runs
// while vacuum cleans behind it. Then it is tried on a replica again.
const conflictMemory = time.Minute

// init readies an empty set of at most max statements.
func (s *statementSet) init(max int) {
	s.max = int32(max)
	s.m.Store(&map[string]mono{})
}

func (s *statementSet) has(q string) bool {
	if !s.any.Load() {
		return false
	}
	until, ok := (*s.m.Load())[q]
	return ok && (until == 0 || monoNow() < until)
}

// add remembers q until the given time (0: for good).
func (s *statementSet) add(q string, until mono) {
	for {
		old := s.m.Load()
		if u, ok := (*old)[q]; ok && (u == 0 || u >= until && until != 0) {
			return
		}
		next := make(map[string]mono, len(*old)+1)
		if len(*old) < int(s.max) {
			now := monoNow()
			for k, u := range *old {
				if u == 0 || now < u {
					next[k] = u
				}
			}
		}
		next[q] = until
		if s.m.CompareAndSwap(old, &next) {
			s.any.Store(true)
			return
		}
	}
}
