package pgreplicahttp

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
)

// clock is a settable time source for a MemoryStore.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newTestStore(max int) (*MemoryStore, *clock) {
	c := &clock{now: time.Unix(1_700_000_000, 0)}
	m := NewMemoryStore(max)
	m.now = c.Now
	return m, c
}

func mustGet(t *testing.T, m *MemoryStore, key string) (pgreplica.LSN, bool) {
	t.Helper()
	tok, ok, err := m.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return tok.LSN, ok
}

func mustPut(t *testing.T, m *MemoryStore, key string, tok pgreplica.Token, ttl time.Duration) {
	t.Helper()
	if err := m.Put(context.Background(), key, tok, ttl); err != nil {
		t.Fatal(err)
	}
}

func TestMemoryStoreMaxMerge(t *testing.T) {
	m, _ := newTestStore(0)
	if _, ok := mustGet(t, m, "k"); ok {
		t.Fatal("empty store has k")
	}
	mustPut(t, m, "k", pgreplica.Token{LSN: 0x1_00000000}, time.Minute)
	mustPut(t, m, "k", pgreplica.Token{LSN: 0xFFFFFFFF}, time.Minute) // lower, though longer as text
	if lsn, _ := mustGet(t, m, "k"); lsn != 0x1_00000000 {
		t.Fatalf("older token lowered the entry to %v", lsn)
	}
	mustPut(t, m, "k", pgreplica.Token{LSN: 0x1_00000001, Timeline: 2}, time.Minute)
	tok, _, _ := m.Get(context.Background(), "k")
	if tok.LSN != 0x1_00000001 || tok.Timeline != 2 {
		t.Fatalf("newer token not kept whole: %+v", tok)
	}
	// On a tie the stored token stays.
	mustPut(t, m, "k", pgreplica.Token{LSN: 0x1_00000001, Timeline: 3}, time.Minute)
	if tok, _, _ := m.Get(context.Background(), "k"); tok.Timeline != 2 {
		t.Fatalf("tie replaced the stored token: %+v", tok)
	}
}

func TestMemoryStoreTTL(t *testing.T) {
	m, c := newTestStore(0)
	mustPut(t, m, "k", pgreplica.Token{LSN: 10}, time.Minute)
	c.Add(50 * time.Second)
	// A losing Put still extends the entry's life.
	mustPut(t, m, "k", pgreplica.Token{LSN: 5}, time.Minute)
	c.Add(50 * time.Second)
	if lsn, ok := mustGet(t, m, "k"); !ok || lsn != 10 {
		t.Fatalf("entry gone before its extended TTL: %v %v", lsn, ok)
	}
	c.Add(11 * time.Second)
	if _, ok := mustGet(t, m, "k"); ok {
		t.Fatal("entry outlived its TTL")
	}
	if m.Len() != 0 {
		t.Fatalf("expired entry kept: %d", m.Len())
	}

	// ttl ≤ 0: no expiry for a new or winning token; a losing one keeps
	// the stored TTL.
	mustPut(t, m, "forever", pgreplica.Token{LSN: 1}, 0)
	c.Add(1000 * time.Hour)
	if _, ok := mustGet(t, m, "forever"); !ok {
		t.Fatal("ttl 0 entry expired")
	}
	mustPut(t, m, "kept", pgreplica.Token{LSN: 9}, time.Minute)
	mustPut(t, m, "kept", pgreplica.Token{LSN: 8}, 0)
	c.Add(2 * time.Minute)
	if _, ok := mustGet(t, m, "kept"); ok {
		t.Fatal("losing ttl-0 Put removed the stored TTL")
	}

	// A token past its own Expires counts as absent.
	mustPut(t, m, "exp", pgreplica.Token{LSN: 3, Expires: c.Now().Add(time.Second)}, time.Hour)
	c.Add(time.Second)
	if _, ok := mustGet(t, m, "exp"); ok {
		t.Fatal("token past its Expires returned")
	}
}

func TestMemoryStoreBounded(t *testing.T) {
	m, c := newTestStore(3)
	mustPut(t, m, "a", pgreplica.Token{LSN: 1}, 3*time.Minute)
	mustPut(t, m, "b", pgreplica.Token{LSN: 1}, time.Minute) // closest to expiry
	mustPut(t, m, "c", pgreplica.Token{LSN: 1}, 2*time.Minute)
	mustPut(t, m, "d", pgreplica.Token{LSN: 1}, time.Minute)
	if _, ok := mustGet(t, m, "b"); ok || m.Len() != 3 {
		t.Fatalf("full store: b kept %v, %d entries", ok, m.Len())
	}
	for _, k := range []string{"a", "c", "d"} {
		if _, ok := mustGet(t, m, k); !ok {
			t.Fatalf("%s evicted", k)
		}
	}
	// Expired entries make room before anything live is evicted.
	c.Add(90 * time.Second) // d expired
	mustPut(t, m, "e", pgreplica.Token{LSN: 1}, time.Hour)
	for _, k := range []string{"a", "c", "e"} {
		if _, ok := mustGet(t, m, k); !ok {
			t.Fatalf("%s evicted while an expired entry was there", k)
		}
	}
	// Entries without expiry can be evicted too.
	n, _ := newTestStore(2)
	for i := range 10 {
		mustPut(t, n, fmt.Sprint(i), pgreplica.Token{LSN: 1}, 0)
	}
	if n.Len() != 2 {
		t.Fatalf("store over its bound: %d", n.Len())
	}
	// Many keys through a small store stay bounded and the heap stays
	// consistent with the map.
	for i := range 1000 {
		mustPut(t, m, fmt.Sprint("k", i%50), pgreplica.Token{LSN: pgreplica.LSN(i)}, time.Duration(i%7+1)*time.Second)
		if i%10 == 0 {
			c.Add(time.Second)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.entries) > 3 || len(m.expiry) != len(m.entries) {
		t.Fatalf("%d entries, %d in the expiry heap", len(m.entries), len(m.expiry))
	}
	for i, e := range m.expiry {
		if e.index != i || m.entries[e.key] != e {
			t.Fatalf("heap slot %d inconsistent", i)
		}
	}
}

// TestMemoryStoreConcurrentMaxMerge: whatever the interleaving, the stored
// token ends at the highest LSN put.
func TestMemoryStoreConcurrentMaxMerge(t *testing.T) {
	m := NewMemoryStore(0)
	const goroutines, puts = 16, 500
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range puts {
				// Interleaved: goroutine g puts g, g+16, g+32, ... with
				// every other one going backwards.
				lsn := pgreplica.LSN(i*goroutines + g)
				if i%2 == 1 {
					lsn = pgreplica.LSN((puts-i)*goroutines + g)
				}
				if err := m.Put(context.Background(), "k", pgreplica.Token{LSN: lsn << 20}, time.Minute); err != nil {
					t.Error(err)
				}
				if _, _, err := m.Get(context.Background(), "k"); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	want := pgreplica.LSN(puts*goroutines-goroutines+goroutines-1) << 20 // max over all puts
	if lsn, _ := mustGet(t, m, "k"); lsn != want {
		t.Fatalf("final %v, want %v", lsn, want)
	}
}

func TestMemoryStoreCancelled(t *testing.T) {
	m := NewMemoryStore(0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := m.Put(ctx, "k", pgreplica.Token{LSN: 1}, 0); err == nil {
		t.Fatal("Put on a cancelled context succeeded")
	}
	if _, _, err := m.Get(ctx, "k"); err == nil {
		t.Fatal("Get on a cancelled context succeeded")
	}
}

// TestMemoryStorePerCluster: the store max-merges per cluster, so a write
// on one cluster never drops another cluster's position, whichever LSN is
// higher.
func TestMemoryStorePerCluster(t *testing.T) {
	const a, b, c = 0xA, 0xB, 0xC
	m, clk := newTestStore(0)
	get := func() pgreplica.Token {
		t.Helper()
		tok, ok, err := m.Get(context.Background(), "k")
		if err != nil || !ok {
			t.Fatalf("Get: %v %v", ok, err)
		}
		return tok
	}
	mustPut(t, m, "k", pgreplica.Token{LSN: 0x5_00000000, SystemID: a}, time.Minute)
	mustPut(t, m, "k", pgreplica.Token{LSN: 0x100, SystemID: b}, time.Minute) // far lower, other cluster
	want := pgreplica.Token{LSN: 0x5_00000000, SystemID: a, Others: []pgreplica.Position{{SystemID: b, LSN: 0x100}}}
	if got := get(); !got.Equal(want) {
		t.Fatalf("after writes on a then b: %+v, want %+v", got, want)
	}
	// A token of both clusters raises one and leaves the other.
	mustPut(t, m, "k", pgreplica.Token{LSN: 0x4_00000000, SystemID: a, Others: []pgreplica.Position{{SystemID: b, LSN: 0x200}, {SystemID: c, LSN: 1}}}, time.Minute)
	want = pgreplica.Token{LSN: 0x5_00000000, SystemID: a, Others: []pgreplica.Position{{SystemID: b, LSN: 0x200}, {SystemID: c, LSN: 1}}}
	if got := get(); !got.Equal(want) {
		t.Fatalf("after a multi-cluster Put: %+v, want %+v", got, want)
	}
	// A Put that adds nothing keeps the stored TTL when it asks for none.
	mustPut(t, m, "k", pgreplica.Token{LSN: 0x100, SystemID: b}, 0)
	clk.Add(2 * time.Minute)
	if _, ok, _ := m.Get(context.Background(), "k"); ok {
		t.Fatal("a Put that changed nothing removed the TTL")
	}
	// A stored token past its own Expires is replaced, not merged.
	mustPut(t, m, "e", pgreplica.Token{LSN: 9, SystemID: a, Expires: clk.Now().Add(time.Second)}, time.Hour)
	clk.Add(time.Second)
	mustPut(t, m, "e", pgreplica.Token{LSN: 1, SystemID: b}, time.Hour)
	if tok, ok, _ := m.Get(context.Background(), "e"); !ok || !tok.Equal(pgreplica.Token{LSN: 1, SystemID: b}) {
		t.Fatalf("Put over an expired token: %+v %v", tok, ok)
	}
}
