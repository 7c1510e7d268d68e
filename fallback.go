package pgreplica

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
)

// fallbackGate is the connector's part that bounds concurrent fallback
// reads on the primary: when every replica lags in a write burst, sending
// all reads to the primary at once can take it down exactly when it is
// busiest. A read holds one of its slots while it runs there.
type fallbackGate struct {
	slots chan struct{}
	// wait bounds a wait whose context has no deadline
	// (Config.ConnectTimeout, as for a connection).
	wait time.Duration
	// lastStormLog rate-limits the fallback-storm warning (unix ns).
	lastStormLog atomic.Int64
	// The connector's counters (the peak of slots held, the reads
	// refused) and logger.
	metrics *metrics
	log     *slog.Logger
}

// take queues for a slot, in order of arrival (a channel hands a freed
// slot to the longest waiting sender), until ctx's deadline (or for
// Config.ConnectTimeout when ctx has none), then fails with
// ErrFallbackLimit (a *fallbackLimitError, which wraps the context's
// error too when the context ended the wait).
func (g *fallbackGate) take(ctx context.Context) error {
	if g.tryTake() {
		return nil
	}
	start := time.Now()
	wait := g.wait
	refused := &fallbackLimitError{slots: cap(g.slots), limit: fmt.Sprintf("pgreplica_connect_timeout (%v) ran out, the context having no deadline", g.wait)}
	if dl, ok := ctx.Deadline(); ok {
		wait = dl.Sub(start)
		refused.limit, refused.ctxErr = "the context's deadline", context.DeadlineExceeded
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case g.slots <- struct{}{}:
		g.noteHeld()
		return nil
	case <-t.C:
	case <-ctx.Done():
		refused.limit, refused.ctxErr = contextEnd(ctx.Err()), ctx.Err()
	}
	// The read leaves the queue without a slot: refused, whether the
	// wait or the context ended it.
	refused.waited = time.Since(start)
	g.metrics.fallbackRejected.Add(1)
	g.warnStorm()
	return refused
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
		"fallback_slots", cap(g.slots), "refused_total", g.metrics.fallbackRejected.Load())
}
