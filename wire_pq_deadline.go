package pgreplica

// lib/pq's deadline watch: pgx needs none (see deadlineWatch).

import (
	"context"
	"sync"
	"time"
)

// deadlineWatch makes a statement on lib/pq give up once its context has
// ended. lib/pq cancels a statement by a cancel request that the server
// must read: a server that stopped answering (SIGSTOP, a hung VM, a
// stalled disk) never does, and lib/pq waits in its read forever, past
// any deadline. pgx sets deadlines on the socket itself and needs no
// watch. Once the context has ended and lib/pq has had grace to cancel
// the statement the usual way, the watch closes the connection's socket:
// the statement fails (a write's outcome is then unknown, as it is) and
// the connection is dropped.
type deadlineWatch struct {
	mu    sync.Mutex
	ended bool
	timer *time.Timer
	stop  func() bool
}

// watchDeadline arms a watch over a statement on p for ctx; nil when ctx
// never ends.
func watchDeadline(ctx context.Context, p *physical, grace time.Duration) *deadlineWatch {
	if ctx.Done() == nil {
		return nil
	}
	w := &deadlineWatch{}
	w.stop = context.AfterFunc(ctx, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if !w.ended {
			w.timer = time.AfterFunc(grace, func() { p.socks.close() })
		}
	})
	return w
}

// end disarms the watch: the statement is over. It is idempotent and safe
// on a nil watch.
func (w *deadlineWatch) end() {
	if w == nil {
		return
	}
	w.stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ended = true
	if w.timer != nil {
		w.timer.Stop()
	}
}
