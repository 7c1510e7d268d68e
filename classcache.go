package pgreplica

import (
	"sync"
	"sync/atomic"
)

// classCache remembers the classification of long statements (ORMs send
// the same few kilobytes of SQL over and over; lexing them costs
// microseconds, a lookup tens of nanoseconds). Short statements are
// classified afresh: that is as cheap as hashing them. The cache is
// bounded; past its size new statements are simply not remembered.
type classCache struct {
	m    sync.Map // string → stmtClass
	size atomic.Int64
}

const (
	classCacheMinLen = 256
	classCacheMax    = 4096
)

func (cc *classCache) classify(query string) stmtClass {
	if len(query) < classCacheMinLen {
		return classify(query)
	}
	if v, ok := cc.m.Load(query); ok {
		return v.(stmtClass)
	}
	cls := classify(query)
	if cc.size.Load() < classCacheMax {
		if _, loaded := cc.m.LoadOrStore(query, cls); !loaded {
			cc.size.Add(1)
		}
	}
	return cls
}
