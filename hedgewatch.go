package pgreplica

import (
	"context"
	"sync/atomic"
	"time"
)

// hedgeWatch sends the hedges of reads that waited past their delay. One
// goroutine per connector looks at the connections' hedge slots every
// tick while reads arm them, instead of a timer per read: arming a
// runtime timer takes a lock on the timer heap and, when it becomes the
// earliest timer, wakes the network poller (a system call, and a thread
// spinning on another core that the database servers could have used) —
// on every replica read, for a hedge that fires for one read in
// thousands. A hedge goes out up to one tick after its delay.
type hedgeWatch struct {
	tick time.Duration // HedgeDelay / hedgeTicksPerDelay, 1 ms at least
	// ticking is set while the goroutine ticks; a read that arms a slot
	// while it is not wakes it (wake, capacity 1).
	ticking atomic.Bool
	wake    chan struct{}
}

const (
	// hedgeTicksPerDelay is how often the watch looks per hedge delay.
	hedgeTicksPerDelay = 4
	// hedgeIdleTicks is how many ticks in a row with no armed slot put
	// the watch to sleep: a read then wakes it, at most about once per
	// this many ticks when reads are sparse.
	hedgeIdleTicks = 8
)

func newHedgeWatch(delay time.Duration) *hedgeWatch {
	return &hedgeWatch{tick: max(delay/hedgeTicksPerDelay, time.Millisecond), wake: make(chan struct{}, 1)}
}

// now is the watch's clock: the router's (due times are on it).
func (w *hedgeWatch) now() int64 { return int64(monoNow()) }

// armed is called after a slot's due time was stored.
func (w *hedgeWatch) armed() {
	if !w.ticking.Load() {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// run ticks while reads arm slots, sending the hedges that are due,
// until ctx ends.
func (w *hedgeWatch) run(ctx context.Context, c *Connector) {
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	for {
		select {
		case <-w.wake:
		case <-ctx.Done():
			return
		}
		w.ticking.Store(true)
		for idle := 0; idle < hedgeIdleTicks; {
			t.Reset(w.tick)
			select {
			case <-t.C:
			case <-ctx.Done():
				return
			}
			if c.sendDueHedges(w.now()) {
				idle = 0
				continue
			}
			idle++
			if idle == hedgeIdleTicks {
				// A read that armed its slot while ticking was still set
				// did not wake the watch: look once more after clearing
				// it (a read sees the clear, or this look sees its slot).
				w.ticking.Store(false)
				if c.sendDueHedges(w.now()) {
					w.ticking.Store(true)
					idle = 0
				}
			}
		}
	}
}

// sendDueHedges launches the hedge of every slot whose read is past its
// due time, and reports whether any slot is armed.
func (c *Connector) sendDueHedges(now int64) (armed bool) {
	for _, n := range c.nodes {
		hp := n.pool
		hp.mu.Lock()
		for p := range hp.all {
			s := p.hedge.Load()
			if s == nil {
				continue
			}
			due := s.due.Load()
			if due == 0 {
				continue
			}
			armed = true
			if due > now {
				continue
			}
			// busy before the take: once due is 0 the read may end and
			// the next one would arm the slot over the launch's fields.
			s.busy.Store(true)
			if s.due.CompareAndSwap(due, 0) {
				go s.launch()
			} else {
				s.busy.Store(false) // the read ended first
			}
		}
		hp.mu.Unlock()
	}
	return armed
}
