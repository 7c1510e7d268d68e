package pgreplica

import "sync/atomic"

// refusedStatements remembers the statements a replica refused as writes
// (SQLSTATE 25006, "cannot execute … in a read-only transaction") although
// the classifier took them for reads, so they go straight to the primary
// next time. A bounded set of statement texts, read lock-free on every
// query and written rarely (copy on write); when full it starts over: a
// forgotten statement only costs one more retry.
type refusedStatements struct {
	// any is set once a statement was added: until then (for most
	// applications, always) has reads no map.
	any atomic.Bool
	max int
	m   atomic.Pointer[map[string]struct{}]
}

// init readies an empty set of at most max statements.
func (c *refusedStatements) init(max int) {
	c.max = max
	c.m.Store(&map[string]struct{}{})
}

func (c *refusedStatements) has(q string) bool {
	if !c.any.Load() {
		return false
	}
	_, ok := (*c.m.Load())[q]
	return ok
}

func (c *refusedStatements) add(q string) {
	for {
		old := c.m.Load()
		if _, ok := (*old)[q]; ok {
			return
		}
		next := make(map[string]struct{}, len(*old)+1)
		if len(*old) < c.max {
			for k := range *old {
				next[k] = struct{}{}
			}
		}
		next[q] = struct{}{}
		if c.m.CompareAndSwap(old, &next) {
			c.any.Store(true)
			return
		}
	}
}
