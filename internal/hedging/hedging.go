// Package hedging holds the statistics behind hedged reads: how long a
// node takes to answer (AnswerTime), which says when a read is late
// enough to hedge, and the token bucket refilled by replica reads that
// bounds how many are (Budget). It knows nothing of the router: the
// caller hands it answer times and the count of replica reads so far.
package hedging

import (
	"sync"
	"sync/atomic"
	"time"
)

// Burst is how many hedges may go out at once after a calm period: a
// replica that freezes has a handful of reads in flight on it.
const Burst = 10

// Budget is a token bucket refilled by replica reads: each adds
// percent/100 of a token, up to Burst; a hedge takes one. It is given the
// count of reads when a hedge is due, so a read that is not hedged pays
// nothing for it.
type Budget struct {
	mu      sync.Mutex
	percent float64
	tokens  float64
	reads   int64 // replica reads at the last refill
}

// NewBudget returns a full budget that allows percent hedges per 100
// replica reads.
func NewBudget(percent int) *Budget {
	return &Budget{percent: float64(percent), tokens: Burst}
}

// Take reports whether a hedge may go out, given the replica reads so far.
func (b *Budget) Take(reads int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tokens = min(Burst, b.tokens+float64(reads-b.reads)*b.percent/100)
	b.reads = reads
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// AnswerTime estimates how long a node takes to answer a read (to the
// first row or the end of a result without rows), as TCP estimates its
// retransmission timeout: a smoothed mean and a smoothed mean deviation.
// Updates may be lost to a concurrent one; an estimate needs no more.
type AnswerTime struct {
	mean, dev atomic.Int64 // nanoseconds
}

// Observe folds one answer's time into the estimate.
func (a *AnswerTime) Observe(d time.Duration) {
	m := a.mean.Load()
	if m == 0 {
		a.mean.Store(int64(d))
		a.dev.Store(int64(d) / 2)
		return
	}
	diff := int64(d) - m
	a.mean.Store(m + diff/8)
	dv := a.dev.Load()
	a.dev.Store(dv + (max(diff, -diff)-dv)/4)
}

// HedgeDelay is how long to wait for an answer before hedging: what the
// answers predict (mean plus four deviations), never less than floor.
func (a *AnswerTime) HedgeDelay(floor time.Duration) time.Duration {
	return max(floor, time.Duration(a.mean.Load()+4*a.dev.Load()))
}
