package hedging

import (
	"sync"
	"testing"
	"time"
)

// TestHedgeBudget: hedges are bounded to MaxHedgePercent of replica reads,
// after a burst.
func TestHedgeBudget(t *testing.T) {
	b := NewBudget(5)
	sent := 0
	for reads := int64(1); reads <= 1000; reads++ {
		if b.Take(reads) { // every read wants a hedge
			sent++
		}
	}
	// The burst, then one per 20 reads.
	if want := Burst + 1000*5/100; sent < want-1 || sent > want {
		t.Errorf("%d hedges for 1000 reads, want about %d", sent, want)
	}
	if b.Take(1000) {
		t.Errorf("a hedge without a read since the last one")
	}
}

// TestBudgetRefillsToBurst: a long calm period refills the bucket to the
// burst, no further.
func TestBudgetRefillsToBurst(t *testing.T) {
	b := NewBudget(100)
	sent := 0
	for b.Take(0) {
		sent++
	}
	if sent != Burst {
		t.Fatalf("%d hedges from a full budget, want %d", sent, Burst)
	}
	sent = 0
	for b.Take(1_000_000) {
		sent++
	}
	if sent != Burst {
		t.Errorf("%d hedges after a million reads, want the burst %d", sent, Burst)
	}
}

// TestZeroPercentAllowsOnlyTheBurst: with no percentage reads add nothing.
func TestZeroPercentAllowsOnlyTheBurst(t *testing.T) {
	b := NewBudget(0)
	sent := 0
	for reads := int64(0); reads < 1000; reads++ {
		if b.Take(reads) {
			sent++
		}
	}
	if sent != Burst {
		t.Errorf("%d hedges at 0%%, want only the burst %d", sent, Burst)
	}
}

func TestBudgetConcurrentTakes(t *testing.T) {
	b := NewBudget(0)
	var mu sync.Mutex
	var wg sync.WaitGroup
	sent := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				if b.Take(0) {
					mu.Lock()
					sent++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if sent != Burst {
		t.Errorf("%d hedges taken concurrently, want %d", sent, Burst)
	}
}

// TestHedgeDelayFollowsAnswers: the delay is the floor until answers
// are slower than it, then a little above them.
func TestHedgeDelayFollowsAnswers(t *testing.T) {
	var a AnswerTime
	if d := a.HedgeDelay(50 * time.Millisecond); d != 50*time.Millisecond {
		t.Errorf("no answers yet: delay %v, want the floor", d)
	}
	for range 50 {
		a.Observe(100 * time.Millisecond)
	}
	if d := a.HedgeDelay(50 * time.Millisecond); d < 100*time.Millisecond || d > 150*time.Millisecond {
		t.Errorf("answers of 100ms: delay %v, want a little above 100ms", d)
	}
	for range 50 {
		a.Observe(time.Millisecond)
	}
	if d := a.HedgeDelay(50 * time.Millisecond); d != 50*time.Millisecond {
		t.Errorf("answers of 1ms: delay %v, want the floor", d)
	}
}
