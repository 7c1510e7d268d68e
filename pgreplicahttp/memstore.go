package pgreplicahttp

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"github.com/pgreplica/pgreplica"
)

// DefaultMemoryStoreEntries bounds a MemoryStore created with a
// non-positive size.
const DefaultMemoryStoreEntries = 100_000

// MemoryStore is a TokenStore in the memory of one process: enough for a
// single application instance (tabs and devices of a user share it), not
// for several instances behind a load balancer (use a shared store such as
// redisstore there). It holds at most its bound of entries: expired ones
// are dropped as they are met, and when the store is full the entry
// closest to expiry goes first. Losing an entry loses no data, only the
// read-your-writes guarantee of that key's other tabs until their next
// write. It needs no goroutine and no Close.
type MemoryStore struct {
	max int
	now func() time.Time // time.Now; tests inject a clock

	mu      sync.Mutex
	entries map[string]*memEntry
	expiry  expiryHeap // the entries that expire, soonest first
}

type memEntry struct {
	key     string
	tok     pgreplica.Token
	expires time.Time // zero: never
	index   int       // position in expiryHeap, -1 when not in it
}

// NewMemoryStore returns an empty store that holds at most maxEntries
// keys; a non-positive maxEntries means DefaultMemoryStoreEntries.
func NewMemoryStore(maxEntries int) *MemoryStore {
	if maxEntries <= 0 {
		maxEntries = DefaultMemoryStoreEntries
	}
	return &MemoryStore{max: maxEntries, now: time.Now, entries: make(map[string]*memEntry)}
}

// Get implements TokenStore. It never fails.
func (m *MemoryStore) Get(ctx context.Context, key string) (pgreplica.Token, bool, error) {
	if err := ctx.Err(); err != nil {
		return pgreplica.Token{}, false, err
	}
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[key]
	switch {
	case !ok:
		return pgreplica.Token{}, false, nil
	case !e.expires.IsZero() && !now.Before(e.expires):
		m.remove(e)
		return pgreplica.Token{}, false, nil
	case expired(e.tok, now):
		return pgreplica.Token{}, false, nil
	}
	return e.tok, true, nil
}

// Put implements TokenStore with per-cluster max-merge semantics under one
// mutex. It never fails.
func (m *MemoryStore) Put(ctx context.Context, key string, tok pgreplica.Token, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dropExpired(now)
	e, ok := m.entries[key]
	var stored pgreplica.Token
	if ok {
		stored = e.tok
	}
	tok, won := merged(stored, ok, tok, now)
	if !ok {
		if len(m.entries) >= m.max {
			m.evictOne()
		}
		e = &memEntry{key: key, index: -1}
		m.entries[key] = e
	}
	if won {
		e.tok = tok
	}
	switch {
	case ttl > 0:
		e.expires = now.Add(ttl)
		if e.index < 0 {
			heap.Push(&m.expiry, e)
		} else {
			heap.Fix(&m.expiry, e.index)
		}
	case !won:
		// No expiry asked for and the stored token stayed: keep its TTL.
	default:
		e.expires = time.Time{}
		if e.index >= 0 {
			heap.Remove(&m.expiry, e.index)
		}
	}
	return nil
}

// Len returns the number of entries, expired ones not yet dropped
// included.
func (m *MemoryStore) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.entries)
}

// dropExpired removes every entry whose TTL has passed; amortised, each
// entry is removed once.
func (m *MemoryStore) dropExpired(now time.Time) {
	for len(m.expiry) > 0 && !now.Before(m.expiry[0].expires) {
		m.remove(m.expiry[0])
	}
}

// evictOne makes room: the entry closest to expiry, else any entry.
func (m *MemoryStore) evictOne() {
	if len(m.expiry) > 0 {
		m.remove(m.expiry[0])
		return
	}
	for _, e := range m.entries {
		m.remove(e)
		return
	}
}

func (m *MemoryStore) remove(e *memEntry) {
	delete(m.entries, e.key)
	if e.index >= 0 {
		heap.Remove(&m.expiry, e.index)
	}
}

// expiryHeap is a container/heap of entries ordered by expiry.
type expiryHeap []*memEntry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].expires.Before(h[j].expires) }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *expiryHeap) Push(x any) {
	e := x.(*memEntry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	e.index = -1
	*h = old[:len(old)-1]
	return e
}
