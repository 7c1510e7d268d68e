package pgreplica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
)

// Falling back: a read no replica could serve goes to the primary, within
// the bound on concurrent fallback reads.

// errConflicts is why a read fell back after replay conflicts (logs).
var errConflicts = errors.New("replay conflicts cancelled the read on the replicas")

// fallBack serves a read on the primary, which no replica could serve
// (why), within the bound on concurrent fallbacks.
func (c *Connector) fallBack(ctx context.Context, pl *plan, why error) (lease, error) {
	c.log.DebugContext(ctx, "pgreplica: read falls back to the primary", "err", why)
	c.metrics.fallbackReads.Add(1)
	if err := c.fallbacks.take(ctx); err != nil {
		return lease{}, err
	}
	l, err := c.leasePrimary(ctx, c.topo.Load(), true) // the latest primary
	if err != nil {
		c.fallbacks.release()
	}
	return l, err
}

// fallbackGate is the connector's part that bounds concurrent fallback
// reads on the primary: when every replica lags in a write burst, sending
// all reads to the primary at once can take it down exactly when it is
// busiest. A read holds one of its slots while it runs there.
type fallbackGate struct {
	slots chan struct{}
	wait  time.Duration // Config.FallbackWait
	// lastStormLog rate-limits the fallback-storm warning (unix ns).
	lastStormLog atomic.Int64
	// The connector's counters (the peak of slots held, the reads
	// refused) and logger.
	metrics *metrics
	log     *slog.Logger
}

// take queues for a slot, in order of arrival (a channel hands a freed
// slot to the longest waiting sender), until ctx's deadline or
// Config.FallbackWait, whichever comes first, then fails with
// ErrFallbackLimit.
func (g *fallbackGate) take(ctx context.Context) error {
	if g.tryTake() {
		return nil
	}
	wait := g.wait
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl))
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case g.slots <- struct{}{}:
		g.noteHeld()
		return nil
	case <-t.C:
		g.metrics.fallbackRejected.Add(1)
		g.warnStorm()
		return fmt.Errorf("%w: all %d fallback slots stayed taken for %v", ErrFallbackLimit, cap(g.slots), wait.Round(time.Millisecond))
	case <-ctx.Done():
		return ctx.Err()
	}
}

// tryTake takes a slot if one is free now.
func (g *fallbackGate) tryTake() bool {
	select {
	case g.slots <- struct{}{}:
		g.noteHeld()
		return true
	default:
		return false
	}
}

// release frees a slot.
func (g *fallbackGate) release() { <-g.slots }

// noteHeld raises the peak of slots held at once (Stats).
func (g *fallbackGate) noteHeld() {
	held := int64(len(g.slots))
	for peak := g.metrics.fallbackPeak.Load(); held > peak; peak = g.metrics.fallbackPeak.Load() {
		if g.metrics.fallbackPeak.CompareAndSwap(peak, held) {
			return
		}
	}
}

// warnStorm logs, at most once a second, that reads are being refused
// because too many already fell back to the primary.
func (g *fallbackGate) warnStorm() {
	now := time.Now().UnixNano()
	last := g.lastStormLog.Load()
	if now-last < int64(time.Second) || !g.lastStormLog.CompareAndSwap(last, now) {
		return
	}
	g.log.Warn("pgreplica: fallback storm: reads refused, the primary already serves the maximum of fallback reads",
		"max_primary_fallbacks", cap(g.slots), "refused_total", g.metrics.fallbackRejected.Load())
}
