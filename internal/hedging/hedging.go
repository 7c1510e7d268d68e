// Package hedging bounds how many reads the router hedges: a token bucket
// refilled by replica reads (Budget). It knows nothing of the router: the
// caller hands it the count of replica reads so far.
package hedging

import "sync"

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
