package pgreplica

import "sync/atomic"

// stmtCache is a bounded set of statement texts, read lock-free on every
// query and written rarely (copy on write). When full it starts over: a
// forgotten statement only costs one more SQLSTATE 25006 retry.
type stmtCache struct {
	max int
	m   atomic.Pointer[map[string]struct{}]
}

func newStmtCache(max int) *stmtCache {
	c := &stmtCache{max: max}
	c.m.Store(&map[string]struct{}{})
	return c
}

func (c *stmtCache) has(q string) bool {
	_, ok := (*c.m.Load())[q]
	return ok
}

func (c *stmtCache) add(q string) {
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
			return
		}
	}
}
