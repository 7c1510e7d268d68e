package pgreplica

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// classCache remembers the classification of statements (applications
// and ORMs send the same statements over and over; lexing a long one costs
// microseconds, and even a short one costs about half a microsecond on a
// read's path, where the lexer's code and tables are no longer in the CPU
// cache). The cache is bounded; past its size new statements are simply
// not remembered.
//
// In front of the map, recent holds entries by the address of the
// statement's text: code that sends a constant string (sqlc, hand-written
// queries, most ORMs' cached statements) passes the same address every
// time, and finding it there costs a pointer comparison where the map
// hashes the whole text and walks its trie (about 0.2 µs on a read's
// path, with the map out of the CPU cache).
type classCache struct {
	recent [classRecent]atomic.Pointer[classEntry]
	m      sync.Map // string → *classEntry
	size   atomic.Int64
}

type classEntry struct {
	query string
	cls   stmtClass
}

const (
	classCacheMax = 4096
	classRecent   = 256 // a power of two
)

func (cc *classCache) classify(query string) stmtClass {
	slot := &cc.recent[(uintptr(unsafe.Pointer(unsafe.StringData(query)))>>4)&(classRecent-1)]
	if e := slot.Load(); e != nil && e.query == query {
		return e.cls
	}
	if v, ok := cc.m.Load(query); ok {
		e := v.(*classEntry)
		slot.Store(e)
		return e.cls
	}
	cls := classify(query)
	if cc.size.Load() < classCacheMax {
		if _, loaded := cc.m.LoadOrStore(query, &classEntry{query: query, cls: cls}); !loaded {
			cc.size.Add(1)
		}
	}
	return cls
}
