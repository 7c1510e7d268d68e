//go:build linux

package patroni

import (
	"context"
	"slices"
	"sync"
	"time"
)

// WriterChange is a change of the members HAProxy's writer port sends new
// connections to, as its stats socket said.
type WriterChange struct {
	At time.Time
	Up []int
}

// HAProxyWatch reads HAProxy's writer port membership every few
// milliseconds: through HAProxy no client reaches a new primary before
// its checks let it, so a write's delay after a promotion is HAProxy's
// first, and the client's only after that.
type HAProxyWatch struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	changes []WriterChange
}

// WatchHAProxy starts watching the writer port every interval (default
// 20 ms); Stop ends it. Without an HAProxy it records nothing.
func (c *Cluster) WatchHAProxy(every time.Duration) *HAProxyWatch {
	if every <= 0 {
		every = 20 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &HAProxyWatch{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		if c.haproxy == nil {
			return
		}
		t := time.NewTicker(every)
		defer t.Stop()
		var last []int
		seen := false
		for {
			if up, err := c.HAProxyUp(ctx); err == nil {
				if !seen || !slices.Equal(up[Writer], last) {
					w.mu.Lock()
					w.changes = append(w.changes, WriterChange{At: time.Now(), Up: up[Writer]})
					w.mu.Unlock()
					last, seen = up[Writer], true
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return w
}

// Stop ends the watch and returns the changes in time order.
func (w *HAProxyWatch) Stop() []WriterChange {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.changes)
}

// WriterUpAfter is when, at or after t, HAProxy's writer port first had
// member m up, and whether it did.
func WriterUpAfter(changes []WriterChange, t time.Time, m int) (time.Time, bool) {
	for i, ch := range changes {
		if !slices.Contains(ch.Up, m) {
			continue
		}
		if !ch.At.Before(t) {
			return ch.At, true
		}
		// Up before t: up at t unless a later change took it out.
		if i+1 == len(changes) || changes[i+1].At.After(t) {
			return t, true
		}
	}
	return time.Time{}, false
}
