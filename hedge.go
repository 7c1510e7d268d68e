package pgreplica

import (
	"context"
	"database/sql/driver"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/puddle/v2"
)

// Hedged reads: a replica that stops answering (a stalled disk, a hung VM)
// is alive to TCP and to the pool, and the monitor needs a probe timeout to
// notice. A read outside a transaction is idempotent, so when its replica
// has not answered within the hedge delay it is also sent to another
// replica that satisfies the same plan; the first answer wins and the
// other attempt is cut off (its socket closed: a frozen server answers no
// cancel request). Hedges are bounded by a budget, so a cluster that is
// slow everywhere is not doubled in load.

// errHedgeLost ends the connection of the attempt that lost the race: its
// socket was closed, or its answer was not wanted.
var errHedgeLost = errors.New("pgreplica: another attempt of this read answered first")

// hedgeBurst is how many hedges may go out at once after a calm period:
// a replica that freezes has a handful of reads in flight on it.
const hedgeBurst = 10

// hedgeBudget is a token bucket refilled by replica reads: each adds
// MaxHedgePercent/100 of a token, up to hedgeBurst; a hedge takes one. It
// counts reads from the metrics when a hedge is due, so a read that is not
// hedged pays nothing for it.
type hedgeBudget struct {
	mu      sync.Mutex
	percent float64
	tokens  float64
	reads   int64 // replica reads at the last refill
}

func newHedgeBudget(percent int) *hedgeBudget {
	return &hedgeBudget{percent: float64(percent), tokens: hedgeBurst}
}

// take reports whether a hedge may go out, given the replica reads so far.
func (b *hedgeBudget) take(reads int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tokens = min(hedgeBurst, b.tokens+float64(reads-b.reads)*b.percent/100)
	b.reads = reads
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// answerTime estimates how long a node takes to answer a read (to the
// first row or the end of a result without rows), as TCP estimates its
// retransmission timeout: a smoothed mean and a smoothed mean deviation.
// Updates may be lost to a concurrent one; an estimate needs no more.
type answerTime struct {
	mean, dev atomic.Int64 // nanoseconds
}

func (a *answerTime) observe(d time.Duration) {
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

// hedgeDelay is how long a read waits for the node before it is hedged:
// what the node's answers predict (mean plus four deviations), never less
// than floor.
func (a *answerTime) hedgeDelay(floor time.Duration) time.Duration {
	return max(floor, time.Duration(a.mean.Load()+4*a.dev.Load()))
}

// hedgeState is where a hedged read stands; hedge.mu guards it.
type hedgeState uint8

const (
	hedgeArmed     hedgeState = iota // the timer may still fire
	hedgeNone                        // no hedge: the first attempt ended first, or none was possible
	hedgeRunning                     // the hedge is out, neither has won
	hedgeFirstWon                    // the first attempt answered first
	hedgeSecondWon                   // the hedge answered first
)

// hedgeResult is what the hedge attempt produced, for the caller.
type hedgeResult[T any] struct {
	l   lease
	v   T
	err error
}

// hedge is one read that may be sent twice.
type hedge[T any] struct {
	c     *Connector
	ctx   context.Context
	pl    *plan
	st    *statement[T]
	first *physical

	mu     sync.Mutex
	state  hedgeState
	second *physical           // the hedge's connection, once it has one
	done   chan hedgeResult[T] // the hedge's outcome (buffered: never blocks)
}

// hedgeable reports whether a read on l may be hedged.
func (c *Connector) hedgeable(pl *plan, l *lease) bool {
	return pl.read && l.replica && c.cfg.HedgeDelay > 0
}

// runHedged runs st on the first lease and, if no answer came within the
// hedge delay, also on another replica; it returns the lease and result
// of the attempt that answered first.
func runHedged[T any](ctx context.Context, c *Connector, pl *plan, first lease, st *statement[T]) (lease, T, error) {
	h := &hedge[T]{c: c, ctx: ctx, pl: pl, st: st, first: first.p}
	timer := time.AfterFunc(first.p.node.answers.hedgeDelay(c.cfg.HedgeDelay), h.launch)
	v, err := st.op(ctx, first.p)
	if timer.Stop() {
		return first, v, err // answered in time: no hedge
	}
	h.mu.Lock()
	switch h.state {
	case hedgeArmed, hedgeNone:
		h.state = hedgeNone // a launch still to come does nothing
		h.mu.Unlock()
		return first, v, err
	case hedgeRunning:
		if err == nil {
			h.state = hedgeFirstWon
			if h.second != nil {
				h.second.socks.close() // cut the hedge off
			}
			h.mu.Unlock()
			return first, v, nil
		}
		h.mu.Unlock()
		// The first attempt failed: the hedge may still answer.
		r := <-h.done
		if r.err != nil {
			return first, v, err
		}
		first.release(errHedgeLost)
		return r.l, r.v, nil
	default: // hedgeSecondWon: the hedge cut the first attempt off
		h.mu.Unlock()
		if err == nil {
			st.discard(v)
		}
		first.release(errHedgeLost)
		// The replica did not answer in time where another did: keep reads
		// away from it until a probe says it answers again.
		first.p.node.markSuspect()
		r := <-h.done
		return r.l, r.v, nil
	}
}

// launch sends the hedge, on the timer's goroutine.
func (h *hedge[T]) launch() {
	h.mu.Lock()
	if h.state != hedgeArmed {
		h.mu.Unlock()
		return
	}
	n := h.target()
	if n == nil || !h.c.hedges.take(h.c.metrics.replicaReads.Load()) {
		if n != nil {
			h.c.metrics.hedgesDenied.Add(1)
		}
		h.state = hedgeNone
		h.mu.Unlock()
		return
	}
	h.state = hedgeRunning
	h.done = make(chan hedgeResult[T], 1)
	h.mu.Unlock()
	h.c.metrics.hedges.Add(1)

	res, err := n.pool.acquire(h.ctx)
	if err != nil {
		h.done <- hedgeResult[T]{err: err}
		return
	}
	l := h.c.newLease(res, true, false)
	h.mu.Lock()
	if h.state != hedgeRunning {
		h.mu.Unlock()
		l.release(nil) // nothing was sent on it
		h.done <- hedgeResult[T]{err: errHedgeLost}
		return
	}
	h.second = l.p
	h.mu.Unlock()

	v, err := h.st.op(h.ctx, l.p)
	h.mu.Lock()
	switch {
	case h.state == hedgeFirstWon:
		h.mu.Unlock()
		if err == nil {
			h.st.discard(v)
		}
		l.release(errHedgeLost)
		h.done <- hedgeResult[T]{err: errHedgeLost}
		return
	case err == nil:
		h.state = hedgeSecondWon
		h.first.socks.close() // cut the first attempt off
	}
	h.mu.Unlock()
	if err != nil {
		l.release(err)
		h.done <- hedgeResult[T]{err: err}
		return
	}
	h.c.metrics.hedgeWins.Add(1)
	h.done <- hedgeResult[T]{l: l, v: v}
}

// target picks the replica a hedge goes to: one the plan accepts, other
// than the first attempt's, proven fresh by its cached replay position (a
// hedge does not wait). After a read served by the session's last replica
// without a bound (affinity), the hedge must also have what that read saw.
// nil when there is none. Called with h.mu held, before the caller may
// touch the plan again.
func (h *hedge[T]) target() *node {
	pl := *h.pl
	if pl.prefer != nil {
		if !pl.lastReadBoundKnown {
			return nil
		}
		pl.need = max(pl.need, pl.lastReadBound)
	}
	pl.tried.add(h.first.node.idx)
	set := pl.replicas(true)
	if set == 0 && pl.zone != "" {
		pl.zone = "" // the first attempt may hold the only replica in zone
		set = pl.replicas(true)
	}
	if set == 0 {
		return nil
	}
	return pl.topo.nodes[pick(h.c.picker, pl.topo, set)].n
}

// acquireReplica borrows a connection to replica n. When another replica
// could serve the read and n has no idle connection, it waits no longer
// than n's hedge delay for a new one: a frozen server accepts the TCP
// connection and never answers its startup, and the read would wait for
// it until its deadline. The dial goes on in the pool's background.
func (c *Connector) acquireReplica(ctx context.Context, n *node, others bool) (*puddle.Resource[*physical], error) {
	if !others || c.cfg.HedgeDelay <= 0 {
		return n.pool.acquire(ctx)
	}
	if res, ok := n.pool.tryAcquire(ctx); ok {
		return res, nil
	}
	actx, cancel := context.WithTimeout(ctx, n.answers.hedgeDelay(c.cfg.HedgeDelay))
	defer cancel()
	return n.pool.acquire(actx)
}

// discardRows closes the rows of an attempt that lost.
func discardRows(r driver.Rows) { r.Close() }
