package stmtset

import (
	"fmt"
	"sync"
	"testing"
	"time"
	"unsafe"
)

// TestSetSize: a Set takes 16 bytes, as the connector's hot lines count it.
func TestSetSize(t *testing.T) {
	if got := unsafe.Sizeof(Set{}); got != 16 {
		t.Errorf("a Set takes %d bytes, want 16", got)
	}
}

func TestEmptySetHasNothing(t *testing.T) {
	var s Set
	s.Init(4)
	if s.Has("SELECT 1") || s.Has("") {
		t.Error("an empty set has a statement")
	}
}

// TestKeptForGood: a statement added with no time is kept until the set
// is full, and a later timed add does not shorten it.
func TestKeptForGood(t *testing.T) {
	var s Set
	s.Init(4)
	s.Add("SELECT f()", 0)
	s.Add("SELECT f()", time.Nanosecond)
	time.Sleep(time.Millisecond)
	if !s.Has("SELECT f()") {
		t.Error("a statement kept for good was forgotten")
	}
	if s.Has("SELECT g()") {
		t.Error("a statement never added is in the set")
	}
}

// TestForgottenAfterItsTime: a timed statement is in the set until its
// time runs out; adding it for good then keeps it.
func TestForgottenAfterItsTime(t *testing.T) {
	var s Set
	s.Init(4)
	s.add("SELECT 1", now()-1)
	if s.Has("SELECT 1") {
		t.Error("a statement past its time is in the set")
	}
	s.Add("SELECT 2", time.Hour)
	if !s.Has("SELECT 2") {
		t.Error("a statement kept for an hour is not in the set")
	}
	s.Add("SELECT 1", 0)
	if !s.Has("SELECT 1") {
		t.Error("a statement added for good after it expired is not in the set")
	}
}

// TestLongerKeepWins: adding a statement again extends its time, never
// shortens it.
func TestLongerKeepWins(t *testing.T) {
	var s Set
	s.Init(4)
	s.Add("q", time.Hour)
	until := (*s.m.Load())["q"]
	s.Add("q", time.Minute)
	if got := (*s.m.Load())["q"]; got != until {
		t.Errorf("a shorter add moved the time from %d to %d", until, got)
	}
	s.Add("q", 2*time.Hour)
	if got := (*s.m.Load())["q"]; got <= until {
		t.Errorf("a longer add kept the time at %d", got)
	}
}

// TestFullSetStartsOver: past max statements the set forgets the others
// and keeps the newest.
func TestFullSetStartsOver(t *testing.T) {
	var s Set
	s.Init(3)
	for i := range 3 {
		s.Add(fmt.Sprint("q", i), 0)
	}
	s.Add("q3", 0)
	if got := len(*s.m.Load()); got != 1 || !s.Has("q3") {
		t.Errorf("a full set holds %d statements after an add (q3 kept: %v), want only the new one", got, s.Has("q3"))
	}
	// Expired entries are dropped when the set is copied.
	s.add("old", now()-1)
	s.Add("q4", 0)
	if _, ok := (*s.m.Load())["old"]; ok {
		t.Error("an expired statement survived a copy")
	}
}

func TestConcurrentAdds(t *testing.T) {
	var s Set
	s.Init(1000)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				s.Add(fmt.Sprint(g, "/", i), 0)
				_ = s.Has(fmt.Sprint(g, "/", i/2))
			}
		}()
	}
	wg.Wait()
	for g := range 8 {
		for i := range 50 {
			if q := fmt.Sprint(g, "/", i); !s.Has(q) {
				t.Fatalf("%s lost to a concurrent add", q)
			}
		}
	}
}
