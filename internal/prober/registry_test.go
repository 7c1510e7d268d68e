package prober

import (
	"testing"
	"time"
)

// TestAcquireSharesOneProberPerKey: handles on the same key share one
// running prober, another key gets its own, and the last Release stops
// it and takes it out of the registry.
func TestAcquireSharesOneProberPerKey(t *testing.T) {
	key := Key{DSN: "host=a", Timeout: time.Second}
	a := Acquire(key, testConfig(&fakeServer{user: "app", row: primarySeenByApp}))
	b := Acquire(key, testConfig(&fakeServer{user: "app", row: primarySeenByApp}))
	other := Acquire(Key{DSN: "host=b", Timeout: time.Second}, testConfig(&fakeServer{user: "app", row: primarySeenByApp}))
	defer other.Release()
	if a != b || a == other {
		t.Fatalf("same key: %p and %p; another key: %p", a, b, other)
	}
	registered := func() bool {
		process.mu.Lock()
		defer process.mu.Unlock()
		return process.probers[key] == a
	}
	a.Release()
	select {
	case <-a.done:
		t.Fatal("stopped while a handle holds it")
	default:
	}
	if !registered() {
		t.Fatal("left the registry while a handle holds it")
	}
	b.Release()
	select {
	case <-a.done:
	default:
		t.Fatal("still running after the last Release")
	}
	if registered() {
		t.Error("still in the registry after the last Release")
	}
}
