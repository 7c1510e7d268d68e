package pgreplica

import (
	"sync"
	"sync/atomic"
)

// classCache remembers the classification of statements (applications
// and ORMs send the same statements over and over; lexing a long one costs
// microseconds, and even a short one costs about half a microsecond on a
// read's path, where the lexer's code and tables are no longer in the CPU
// cache; a lookup costs tens of nanoseconds). The cache is bounded; past
// its size new statements are simply not remembered.
type classCache struct {
	m    sync.Map // string → stmtClass
	size atomic.Int64
}

const classCacheMax = 4096

func (cc *classCache) classify(query string) stmtClass {
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
