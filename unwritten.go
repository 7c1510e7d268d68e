package pgreplica

import (
	"context"
	"sync"
	"sync/atomic"
)

// Positions no primary has written. A token from outside may claim any
// position; one ahead of everything the primary wrote names no write
// (forged, or lost in a failover): no replica reaches it within any
// budget, and the primary lacks it too. Every write a read must see
// committed before the read began, so it is at or below the primary's
// position read after that: a read lowers a position ahead of it to it,
// and neither waits for it nor falls back over it (lowerUnwritten), and
// an edge refuses a token that holds one (CheckToken). A write another
// process made a moment ago is ahead of every position this process knows
// too: only the primary's current position tells the two apart, read
// once for every caller that asked before the read was sent (primaryNow).

// primaryNow is a connector's reading of the primary's current insert
// position, shared between callers: each needs a position read after it
// asked, so a caller joins a read that starts after it asked and waits
// for the next one otherwise.
type primaryNow struct {
	// lsn is the position the latest read found (0: none yet).
	lsn atomic.Uint64

	mu sync.Mutex
	// asked counts the callers; answered is asked when the last read that
	// succeeded was sent: it serves every caller up to there.
	asked, answered uint64
	running         bool
	done            chan struct{} // closed when the running read ends
}

// primaryPosition returns the primary's insert position, read after the
// call began (the insert position: a commit made with synchronous_commit
// off is visible before it is flushed).
func (r *router) primaryPosition(ctx context.Context) (LSN, error) {
	pn := &r.now
	pn.mu.Lock()
	pn.asked++
	mine := pn.asked
	for pn.answered < mine {
		if pn.running {
			done := pn.done
			pn.mu.Unlock()
			select {
			case <-done:
			case <-ctx.Done():
				return 0, ctx.Err()
			}
			pn.mu.Lock()
			continue
		}
		pn.running, pn.done = true, make(chan struct{})
		sent := pn.asked
		pn.mu.Unlock()
		lsn, err := r.readPrimaryLSN(ctx, true)
		pn.mu.Lock()
		pn.running = false
		close(pn.done)
		if err != nil {
			pn.mu.Unlock()
			return 0, err
		}
		pn.lsn.Store(uint64(lsn))
		pn.answered = sent
	}
	pn.mu.Unlock()
	return LSN(pn.lsn.Load()), nil
}

// knownWritten is the highest position the primary of t's cluster is
// known to have written: its last probe, the process's captures, the last
// primaryPosition. A position at or below it needs no statement to be
// proven written.
func (r *router) knownWritten(t *topology) LSN {
	known := max(LSN(t.marks.All()), LSN(r.now.lsn.Load()))
	if pv := t.primaryNode(); pv != nil {
		known = max(known, pv.status.lsn)
	}
	return known
}

// written reports whether the primary of t's cluster has written lsn,
// and, when it read the primary's position to tell, that position (0
// otherwise). A position that cannot be read (no primary during a
// failover) counts as written: nothing proves the contrary, and the read
// then goes the way it went before. The error is ctx's.
func (r *router) written(ctx context.Context, t *topology, lsn LSN) (bool, LSN, error) {
	if lsn <= r.knownWritten(t) {
		return true, 0, nil
	}
	now, err := r.capturerFor(t.marks).primaryPosition(ctx)
	if err != nil {
		return true, 0, ctx.Err()
	}
	return lsn <= now, now, nil
}

// lowerUnwritten is the router's rule for a read whose position no
// replica is known to have (acquire.go's leaseReplica calls it before any
// wait): a position the primary has not written is lowered to the
// primary's position now, which every write the read must see is at or
// below. The read then needs what a read of the newest write needs,
// whatever its token claimed: it is never waited on, and never falls
// back over it. It reports whether it lowered pl.need (pl.fresh is then
// recomputed). The primary's position is read within the wait budget.
func (r *router) lowerUnwritten(ctx context.Context, pl *plan) (bool, error) {
	if pl.need == 0 || pl.need <= r.knownWritten(pl.topo) {
		return false, nil
	}
	wctx, cancel := context.WithDeadline(ctx, pl.waitDeadline(ctx))
	ok, now, err := r.written(wctx, pl.topo, pl.need)
	cancel()
	if err != nil && ctx.Err() != nil {
		return false, ctx.Err()
	}
	if ok {
		return false, nil // written, or no position read within the budget
	}
	if pl.need == unreachableLSN {
		// The session's own write position could not be read before its
		// primary went away: it resolves against what the primary has
		// now, once, not on every read of the session.
		pl.session.settleUnreachable(pl.topo.sysid, reachableLSN(now))
	}
	pl.need = reachableLSN(now)
	pl.fresh = pl.replicas(true)
	return true, nil
}
