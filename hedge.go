package pgreplica

import (
	"context"
	"database/sql/driver"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgreplica/pgreplica/internal/hedging"
	"github.com/pgreplica/pgreplica/internal/monoclock"
	"github.com/pgreplica/pgreplica/internal/pgxroute"
	"github.com/pgreplica/pgreplica/internal/stmtclass"
)

// Hedged reads: a replica that stops answering (a stalled disk, a hung VM)
// is alive to TCP and to the pool, and the monitor needs a probe timeout to
// notice. A read outside a transaction is idempotent, so when its replica
// has not answered within the hedge delay it is also sent to another
// replica that satisfies the same plan; the first answer wins and the
// other attempt is cut off (its socket closed: a frozen server answers no
// cancel request). Hedges are bounded by a budget (internal/hedging), so
// a cluster that is slow everywhere is not doubled in load. Here: the
// hedger, each node's answer time, each connection's hedge slot and the
// watch goroutine that sends the hedges that are due.

// errHedgeLost ends the connection of the attempt that lost the race: its
// socket was closed, or its answer was not wanted. It matches
// driver.ErrBadConn so that the pool closes it (pgx does not say it
// is closed until it is used again).
var errHedgeLost = errors.Join(driver.ErrBadConn, errors.New("pgreplica: another attempt of this read answered first"))

// hedger is the connector's part that hedges reads: the budget that
// bounds them and the watch that sends them (hedgeWatch). It sits in
// the connector's hot lines: a replica read that may be hedged reads
// watch.
type hedger struct {
	budget *hedging.Budget
	watch  *hedgeWatch
}

// hedgeState is where a hedged read stands; hedgeSlot.mu guards it.
type hedgeState uint8

const (
	hedgeIdle         hedgeState = iota // no read armed it
	hedgeArmed                          // the timer may still fire
	hedgeNone                           // no hedge: the first attempt ended first, or none was possible
	hedgeRunning                        // the hedge is out, neither has won
	hedgeFirstWon                       // the first attempt answered first
	hedgeSecondWon                      // the hedge answered first
	hedgeSecondFailed                   // the hedge failed before the first attempt ended
)

// hedgeResult is what the hedge attempt produced, for the caller.
type hedgeResult struct {
	l    lease
	rows driver.Rows
	op   pgxroute.HedgeOp // the pgx handle's copy that ran
	err  error
}

// hedgeWork is a read a hedge can send again: the driver's query, or the
// operation of the pgx handle, which makes a fresh copy of itself for the
// hedge and takes over that copy's results when it answers first.
type hedgeWork struct {
	query string
	args  []driver.NamedValue
	cls   stmtclass.Class
	op    pgxroute.HedgeOp // the pgx handle's; nil for the driver's query
}

// run sends the read on p: the query, or op (w.op or a copy of it).
func (w *hedgeWork) run(ctx context.Context, p *physical, op pgxroute.HedgeOp) (driver.Rows, error) {
	if w.op == nil {
		return runQuery(ctx, p, w.query, w.args, w.cls)
	}
	p.note(w.cls)
	return nil, op.Run(pgxConnOf(p.conn))
}

// discard drops the results of an attempt that lost.
func (w *hedgeWork) discard(rows driver.Rows, op pgxroute.HedgeOp) {
	if op != nil {
		op.Discard()
		return
	}
	rows.Close()
}

// hedgeSlot is a connection's hedging state, made with its first hedgeable
// read and reused by every later one: arming a hedge costs a copy of the
// plan and one atomic store of its due time, no allocation; the
// connector's hedgeWatch launches it when due. Only one read at a time
// uses a connection.
//
// due is the handshake: the read publishes its fields by storing it, and
// whoever takes it back to 0 first owns the rest. The read, when its
// answer came first (the usual case, no lock); the watch otherwise, which
// sets busy before it tries and launches the hedge, and from then on the
// state (under mu) says who won. While busy is set (a launch is to come,
// runs or cleans up) the connection's next read arms a slot of its own
// (slot), so a launch never sees a later read's fields.
type hedgeSlot struct {
	first *physical
	watch *hedgeWatch
	// due is when the armed read's hedge is due, on the watch's clock;
	// 0 when none is (the read ended, or the watch took it).
	due  atomic.Int64
	busy atomic.Bool

	mu      sync.Mutex
	state   hedgeState
	waiting bool // the caller waits for done
	second  *physical
	done    chan hedgeResult // the hedge's outcome when the caller waits (cap 1)

	// The read, copied when armed (launch runs on a goroutine of its own).
	delay time.Duration
	c     *router
	ctx   context.Context
	plan  plan
	work  hedgeWork
}

// hedgeable reports whether a read on l may be hedged.
func (r *router) hedgeable(pl *plan, l *lease) bool {
	return pl.read && l.replica && r.settings.hedgeDelay > 0
}

// slot returns p's hedge slot, making it on first use, and anew while the
// last hedge from p still runs or cleans up (busy): a read is never left
// unhedged for it (one that was, on a server that froze meanwhile, waited
// out its deadline). The old slot's launch keeps its own fields; it no
// longer touches p once its read returned.
func (p *physical) slot(w *hedgeWatch) *hedgeSlot {
	s := p.hedgeSlot()
	if s == nil || s.busy.Load() {
		s = &hedgeSlot{first: p, watch: w, done: make(chan hedgeResult, 1)}
		p.hedge.Store(s)
	}
	return s
}

// hedgeSlot returns p's hedge slot, nil until a read made one.
func (p *physical) hedgeSlot() *hedgeSlot {
	s, _ := p.hedge.Load().(*hedgeSlot)
	return s
}

// runHedged runs a read on the first lease and, if no answer came within
// the hedge delay, also on another replica; it returns the lease and rows
// of the attempt that answered first (for the pgx handle's operation, the
// operation holds the results: a hedge's copy that won hands them over).
func (r *router) runHedged(ctx context.Context, pl *plan, first lease, w hedgeWork) (lease, driver.Rows, error) {
	s := first.p.slot(r.hedges.watch)
	// No launch runs, and none starts before due is stored: the fields
	// are the read's own.
	s.state, s.waiting, s.second = hedgeArmed, false, nil
	s.delay = first.p.node.answers.HedgeDelay(r.settings.hedgeDelay)
	s.c, s.ctx, s.plan, s.work = r, ctx, *pl, w
	due := int64(first.start) + int64(s.delay)
	s.due.Store(due)
	s.watch.armed()

	rows, err := w.run(ctx, first.p, w.op)
	if s.due.CompareAndSwap(due, 0) {
		s.forget() // the watch never took it: no hedge, no launch
		return first, rows, err
	}
	// The watch took it: a launch is to come or runs; the state says
	// who won.
	s.mu.Lock()
	state := s.state
	switch {
	case state == hedgeArmed || state == hedgeNone || state == hedgeSecondFailed:
		s.state = hedgeIdle // a launch still to come does nothing
		s.forget()
		s.mu.Unlock()
		return first, rows, err
	case state == hedgeRunning && err == nil:
		s.state = hedgeFirstWon
		if s.second != nil {
			s.second.socks.Close() // cut the hedge off
		}
		s.forget() // launch took what it needs
		s.mu.Unlock()
		return first, rows, nil
	}
	// The hedge answered first (it cut this attempt off), or this attempt
	// failed and the hedge may still answer.
	s.waiting = true
	s.mu.Unlock()
	res := <-s.done
	s.mu.Lock()
	s.forget()
	s.mu.Unlock()
	if res.err != nil {
		return first, rows, err
	}
	if err == nil {
		w.discard(rows, w.op)
	}
	first.release(errHedgeLost)
	if state == hedgeSecondWon {
		// The replica did not answer in time where another did: keep
		// reads away from it until a probe says it answers again.
		first.p.node.markSuspect()
	}
	if w.op != nil {
		w.op.Adopt(res.op)
	}
	return res.l, res.rows, nil
}

// forget drops the read's references (called with mu held).
func (s *hedgeSlot) forget() {
	s.c, s.ctx, s.plan, s.work = nil, nil, plan{}, hedgeWork{}
}

// launch sends the hedge, on a goroutine of its own, once the watch took
// the slot's due time (and set busy, which launch clears when done).
func (s *hedgeSlot) launch() {
	s.mu.Lock()
	if s.state != hedgeArmed {
		// The read ended first.
		s.busy.Store(false)
		s.mu.Unlock()
		return
	}
	c, ctx, w := s.c, s.ctx, s.work
	n := s.pick()
	if n == nil || !c.hedges.budget.Take(c.metrics.replicaReads.Load()) {
		if n != nil {
			c.metrics.hedgesDenied.Add(1)
		}
		s.state = hedgeNone
		s.busy.Store(false)
		s.mu.Unlock()
		return
	}
	s.state = hedgeRunning
	s.mu.Unlock()
	c.metrics.hedges.Add(1)

	r := hedgeResult{}
	var l lease
	res, err := n.pool.acquireRead(ctx)
	if err == nil {
		l = c.newLease(res, true, false)
		c.watchStatement(ctx, &l) // lib/pq's hedge, on a server that may freeze too
		s.mu.Lock()
		lost := s.state != hedgeRunning
		if !lost {
			s.second = l.p
			if w.op != nil {
				// Under the lock, while the first attempt has not won: once
				// it has, its caller may close the operation (pgreplicapgx's
				// rows clear what a copy reads).
				r.op = w.op.Clone()
			}
		}
		s.mu.Unlock()
		if lost {
			l.release(nil) // nothing was sent on it
			s.end(hedgeResult{err: errHedgeLost})
			return
		}
		r.rows, err = w.run(ctx, l.p, r.op)
	}
	s.mu.Lock()
	switch {
	case s.state == hedgeFirstWon:
		s.mu.Unlock()
		if err == nil {
			w.discard(r.rows, r.op)
		}
		if l.p != nil {
			l.release(errHedgeLost)
		}
		s.end(hedgeResult{err: errHedgeLost})
		return
	case err == nil:
		s.state = hedgeSecondWon
		s.first.socks.Close() // cut the first attempt off
		c.metrics.hedgeWins.Add(1)
		r.l = l
	default:
		if l.p != nil {
			l.release(err)
		}
		r.err = err
		if !s.waiting {
			s.state = hedgeSecondFailed
		}
	}
	s.mu.Unlock()
	s.end(r)
}

// end hands the hedge's outcome to a caller that waits for it (or will:
// the hedge won) and frees the slot.
func (s *hedgeSlot) end(r hedgeResult) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.waiting || s.state == hedgeSecondWon {
		s.done <- r
	}
	s.busy.Store(false)
}

// pick chooses the replica a hedge goes to: one the read's own plan
// accepts (every filter of the selector), other than the first attempt's,
// proven fresh by its cached replay position, as a hedge neither waits nor
// checks; nil when there is none. Called with mu held.
func (s *hedgeSlot) pick() *node {
	pl := &s.plan
	if pl.prefer != nil {
		// Served by the session's last replica without a bound on that
		// read (affinity): the hedge must have what that read saw.
		if !pl.lastReadBoundKnown {
			return nil
		}
		pl.need = max(pl.need, pl.lastReadBound)
	}
	pl.tried.add(s.first.node.idx)
	pl.tried |= pl.slow // a server slow to connect now is no hedge
	pl.unchecked = true
	set := pl.replicas(true)
	if set == 0 && pl.zone != "" {
		pl.zone = "" // the first attempt may hold the only replica in zone
		set = pl.replicas(true)
	}
	if set == 0 {
		return nil
	}
	return pl.topo.nodes[s.c.choose(pl.topo, set)].n
}

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
func (w *hedgeWatch) now() int64 { return int64(monoclock.Now()) }

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
func (w *hedgeWatch) run(ctx context.Context, c *router) {
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
func (r *router) sendDueHedges(now int64) (armed bool) {
	for _, n := range r.nodeList() {
		hp := n.pool
		hp.mu.Lock()
		for p := range hp.all {
			s := p.hedgeSlot()
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
