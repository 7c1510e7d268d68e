package stmtclass

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// Cache remembers the classification of statements (applications
// and ORMs send the same statements over and over; lexing a long one costs
// microseconds, and even a short one costs about half a microsecond on a
// read's path, where the lexer's code and tables are no longer in the CPU
// cache). The cache is bounded; past its size new statements are simply
// not remembered. The zero value is ready; a Cache must not be copied.
//
// In front of the map, recent holds entries by the address of the
// statement's text: code that sends a constant string (sqlc, hand-written
// queries, most ORMs' cached statements) passes the same address every
// time, and finding it there costs a pointer comparison where the map
// hashes the whole text and walks its trie (about 0.2 µs on a read's
// path, with the map out of the CPU cache).
type Cache struct {
	recent [recentSlots]atomic.Pointer[entry]
	m      sync.Map // string → *entry
	size   atomic.Int64
}

type entry struct {
	query string
	cls   Class
}

const (
	maxEntries  = 4096
	recentSlots = 256 // a power of two
)

// Classify returns what Classify(query) returns, from the cache when it can.
func (cc *Cache) Classify(query string) Class {
	slot := &cc.recent[(uintptr(unsafe.Pointer(unsafe.StringData(query)))>>4)&(recentSlots-1)]
	if e := slot.Load(); e != nil && e.query == query {
		return e.cls
	}
	if v, ok := cc.m.Load(query); ok {
		e := v.(*entry)
		slot.Store(e)
		return e.cls
	}
	cls := Classify(query)
	if cc.size.Load() < maxEntries {
		if _, loaded := cc.m.LoadOrStore(query, &entry{query: query, cls: cls}); !loaded {
			cc.size.Add(1)
		}
	}
	return cls
}
