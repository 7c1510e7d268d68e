package pgreplica

import (
	"context"
	"errors"
	"fmt"
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
	if err := c.takeFallbackSlot(ctx); err != nil {
		return lease{}, err
	}
	l, err := c.leasePrimary(ctx, c.topo.Load(), true) // the latest primary
	if err != nil {
		<-c.fallbackSlots
	}
	return l, err
}

// takeFallbackSlot bounds concurrent fallback reads on the primary: when
// every replica lags in a write burst, sending all reads to the primary at
// once can take it down exactly when it is busiest. A read queues for a
// slot, in order of arrival (a channel hands a freed slot to the longest
// waiting sender), until its context's deadline or Config.FallbackWait,
// whichever comes first, then fails with ErrFallbackLimit.
func (c *Connector) takeFallbackSlot(ctx context.Context) error {
	select {
	case c.fallbackSlots <- struct{}{}:
		c.noteFallbackSlots()
		return nil
	default:
	}
	wait := c.cfg.FallbackWait
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl))
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case c.fallbackSlots <- struct{}{}:
		c.noteFallbackSlots()
		return nil
	case <-t.C:
		c.metrics.fallbackRejected.Add(1)
		c.warnFallbackStorm()
		return fmt.Errorf("%w: all %d fallback slots stayed taken for %v", ErrFallbackLimit, cap(c.fallbackSlots), wait.Round(time.Millisecond))
	case <-ctx.Done():
		return ctx.Err()
	}
}

// noteFallbackSlots raises the peak of slots held at once (Stats).
func (c *Connector) noteFallbackSlots() {
	held := int64(len(c.fallbackSlots))
	for peak := c.metrics.fallbackPeak.Load(); held > peak; peak = c.metrics.fallbackPeak.Load() {
		if c.metrics.fallbackPeak.CompareAndSwap(peak, held) {
			return
		}
	}
}

// warnFallbackStorm logs, at most once a second, that reads are being
// refused because too many already fell back to the primary.
func (c *Connector) warnFallbackStorm() {
	now := time.Now().UnixNano()
	last := c.lastStormLog.Load()
	if now-last < int64(time.Second) || !c.lastStormLog.CompareAndSwap(last, now) {
		return
	}
	c.log.Warn("pgreplica: fallback storm: reads refused, the primary already serves the maximum of fallback reads",
		"max_primary_fallbacks", cap(c.fallbackSlots), "refused_total", c.metrics.fallbackRejected.Load())
}
