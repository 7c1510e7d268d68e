// Package stmtset is a bounded set of statement texts, each kept for good
// or for a while: the router's memory of the statements the replicas
// would not serve (those a replica refused as writes, those that kept
// conflicting with replay), so that the next run of each goes to the
// primary at once. It needs no router: no connection, no topology; its
// times are on a monotonic clock of its own, compared only with each
// other.
package stmtset

import (
	"sync/atomic"
	"time"
)

// epoch starts the set's clock, when the package loads.
var epoch = time.Now()

// now is a time on the set's clock: monotonic nanoseconds since epoch.
func now() int64 { return int64(time.Since(epoch)) }

// Set is a bounded set of statement texts, read lock-free on every query
// and written rarely (copy on write); when full it starts over: a
// forgotten statement only costs one more retry. Init readies it; a Set
// must not be copied.
type Set struct {
	// any is set once a statement was added: until then (for most
	// applications, always) Has reads no map.
	any atomic.Bool
	max int32 // beside any: a Set takes 16 bytes of the connector's hot lines
	// m maps a statement to when it is forgotten (0: never).
	m atomic.Pointer[map[string]int64]
}

// Init readies an empty set of at most max statements.
func (s *Set) Init(max int) {
	s.max = int32(max)
	s.m.Store(&map[string]int64{})
}

// Has reports whether q is in the set and not yet forgotten.
// The empty set's answer is inlined into the caller: most statements
// meet an empty set.
func (s *Set) Has(q string) bool {
	return s.any.Load() && s.has(q)
}

func (s *Set) has(q string) bool {
	until, ok := (*s.m.Load())[q]
	return ok && (until == 0 || now() < until)
}

// Add remembers q for keep, or for good when keep is 0. A statement
// already kept at least as long stays as it is.
func (s *Set) Add(q string, keep time.Duration) {
	var until int64
	if keep != 0 {
		until = now() + int64(keep)
	}
	s.add(q, until)
}

// add remembers q until the given time on the set's clock (0: for good).
func (s *Set) add(q string, until int64) {
	for {
		old := s.m.Load()
		if u, ok := (*old)[q]; ok && (u == 0 || u >= until && until != 0) {
			return
		}
		next := make(map[string]int64, len(*old)+1)
		if len(*old) < int(s.max) {
			now := now()
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
