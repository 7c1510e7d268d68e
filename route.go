package pgreplica

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/pgreplica/pgreplica/internal/inner"
	"github.com/pgreplica/pgreplica/internal/monoclock"
	"github.com/pgreplica/pgreplica/internal/sqlstate"
	"github.com/pgreplica/pgreplica/internal/stmtclass"
)

// The execution path: everything a plan needs done, once for Exec, Query
// and transactions alike, through both front doors. planFor makes the
// plan; route is the loop, which borrows (acquire.go), runs (as it is,
// hedged, or in flight), accounts for what ran, and sends a failed read
// again as the one retry policy says (retry), remembering the statements
// the replicas would not serve (stmtset.Set); a write is never sent
// twice. What a statement leaves once it ran is recorded here too
// (noteServed, finish, writeFailed).

// planFor reads the context's requirement and decides into pl (in place:
// a plan is a few hundred bytes, copied on every return); the wait
// deadline is set when a wait needs it (plan.waitDeadline).
func (r *router) planFor(ctx context.Context, cls stmtclass.Class, pl *plan) error {
	t := r.topo.Load()
	process := func() processLSNs { return snapshotOf(t.marks) }
	if err := pl.decide(t, cls, requirementFrom(ctx), &r.settings, process, time.Time{}, time.Time{}); err != nil {
		return err
	}
	if pl.session != nil {
		return r.sessionsBegin(ctx, pl)
	}
	return nil
}

// route runs st on a connection the plan allows and returns the lease it
// succeeded on, one of three ways: as it is; hedged, a query outside a
// transaction whose replica is slow to answer (hedge.go); or in flight,
// a read that carries its replay check in its own round trip
// (inflight.go), which goes back to acquire's decision when it did not
// run. A read that failed before returning anything is sent again where
// it can succeed (retry, below). A write is never sent twice.
func (r *router) route(ctx context.Context, pl *plan, st *statement, op func(ctx context.Context, p *physical) error) (lease, error) {
	r.avoidConflicts(pl, st.query)
	inFlight := st.guard != nil || st.inFlight
	var step acquireStep
	for {
		l, check, err := r.acquire(ctx, pl, inFlight, &step)
		if err != nil {
			return lease{}, err
		}
		flight := check != 0
		if !flight {
			if err := r.readyToRun(ctx, pl, &l, st); err != nil {
				// A session's read on the primary first makes the primary
				// show what the session saw (a statement): a connection
				// lost there is retried as the read's own would be.
				if r.retry(ctx, pl, &l, err, st.query) {
					step = stepStart // readyToRun gave l back
					continue
				}
				return lease{}, err
			}
		}
		switch {
		case flight:
			var back bool
			if back, err = r.runInFlight(ctx, pl, &l, st, check); back {
				continue // not run, l given back: acquire decides on
			}
		case (op == nil || st.hedge != nil) && r.hedgeable(pl, &l):
			l, st.rows, err = r.runHedged(ctx, pl, l, hedgeWork{query: st.query, args: st.args, cls: st.cls, op: st.hedge})
		case op != nil:
			err = op(ctx, l.p)
		default:
			st.rows, err = runQuery(ctx, l.p, st.query, st.args, st.cls)
		}
		if err == nil {
			if flight {
				r.noteTokenedRead(pl) // acquire did not count its borrow
			}
			if l.replica {
				l.observeAnswer()
			}
			r.noteServed(ctx, pl, &l)
			return l, nil
		}
		if !flight {
			l.release(err) // runInFlight gave its lease back
		}
		if r.retry(ctx, pl, &l, err, st.query) {
			// A flight sent again goes on from where acquire's decision
			// stood; a read that ran as it is is decided anew.
			if !flight {
				step = stepStart
			}
			continue
		}
		if !pl.read {
			err = r.writeFailed(l.p, err)
		}
		return lease{}, err
	}
}

// readyToRun readies l for st to run as it is or hedged: lib/pq's deadline
// watch armed, st's args converted for l's driver, and for a session's
// read on the primary, the primary made to show what the session's last
// replica read saw (visibility.go). It gives l back when it fails.
func (r *router) readyToRun(ctx context.Context, pl *plan, l *lease, st *statement) error {
	r.watchStatement(ctx, l)
	if err := inner.ConvertArgs(l.p.conn, st.args); err != nil {
		l.release(nil)
		return err
	}
	if pl.read && !l.replica && pl.session != nil {
		if err := r.primaryShowsSession(ctx, pl, l.p); err != nil {
			l.release(err)
			return err
		}
	}
	return nil
}

// noteServed counts a read by where it ran and, for a replica read of a
// session, raises the session to what the replica was known to have.
func (r *router) noteServed(ctx context.Context, pl *plan, l *lease) {
	if !pl.read {
		return
	}
	switch {
	case l.replica:
		r.metrics.replicaReads.Add(1)
		if pl.session != nil {
			pl.session.advance(l.known, pl.topo.timeline, pl.topo.sysid)
		}
	case !l.slot:
		r.metrics.primaryReads.Add(1)
	}
	if r.log.Enabled(ctx, slog.LevelDebug) {
		r.log.DebugContext(ctx, "pgreplica: read", "host", l.p.node.name, "replica", l.replica,
			"fallback", l.slot, "need", pl.need, "replayed", l.known)
	}
}

// finish does what a statement's plan asks once its results are consumed:
// a write through Query is recorded (its position is read later; its
// ticket is returned); a read of a session leaves what bounds the
// session's next read. A statement's snapshot was taken before its answer
// came, so the read ended, for the bound, when it was answered.
func (r *router) finish(pl *plan, l *lease) (ticket uint64) {
	switch {
	case pl.capture:
		return r.wrote(pl, l.p, false)
	case pl.read:
		r.boundRead(pl, l, l.answered)
	}
	return 0
}

// boundRead records what bounds the next read of the plan's session after
// a read on l that ended at end (zero: now; a transaction's ends when it
// does), nothing to do without a session: the replica and when the read
// ran (see plan.affinity), or a ticket for a read on the primary.
func (r *router) boundRead(pl *plan, l *lease, end monoclock.Time) {
	switch {
	case pl.session == nil:
	case l.replica:
		if end == 0 {
			end = monoclock.Now()
		}
		pl.session.noteReplicaRead(pl.topo.sysid, &r.marks, pl.topo.marks, l.p.node, l.p.servedBy(), l.start, end)
	default:
		r.readOnPrimary(pl, l.p)
	}
}

// writeFailed inspects a failed write: a primary that answers "read-only
// transaction" was demoted, a lost connection may mean failover; both wake
// the monitor at once. A write whose connection broke after it was sent
// has an unknown outcome and is never retried.
func (r *router) writeFailed(p *physical, err error) error {
	var notReplicated *NotReplicatedError
	if err == nil || errors.As(err, &notReplicated) {
		// Committed on the primary, its wait for replicas ended: its
		// outcome is known, and the context's deadline in it (a net.Error
		// to ConnLost) says nothing of the connection.
		return err
	}
	switch {
	case sqlstate.Of(err) == sqlstate.ReadOnlyTx:
		r.mon.pokeAll() // the primary was demoted: find the new one
	case sqlstate.ConnLost(err):
		p.node.suspect.Store(true)
		r.mon.pokeAll()
		if !errors.Is(err, driver.ErrBadConn) {
			return fmt.Errorf("%w: %w", ErrWriteOutcomeUnknown, err)
		}
		if p.wire.badConnMaySend() {
			// database/sql sends a statement again on ErrBadConn; this
			// inner driver (lib/pq) also says it when the connection broke
			// after the write was sent. %v, so it is not sent twice.
			return fmt.Errorf("%w: %v", ErrWriteOutcomeUnknown, err)
		}
		// pgx says ErrBadConn only when nothing was sent: database/sql
		// may safely send it again.
	}
	return err
}

// ---- The one retry policy of both front doors ----

// retry reports whether the read that failed on l with err is sent again,
// having changed pl to say where:
//
//   - a replica refused it as a write (SQLSTATE 25006): to the primary as
//     a write, and query is remembered (stmtset.Set);
//   - a replica lost the connection: once to another replica;
//   - a replica cancelled it for a replay conflict: once to another
//     replica, then, as other replicas replay the same WAL, to the
//     primary as a fallback read when the requirement allows one (and
//     query is remembered for conflictMemory);
//   - the primary's connection died with its server: again, on the
//     primary the topology knows by then, up to maxPrimaryResends times.
//
// query is the client's statement text, "" for a batch or a transaction
// (those are not remembered, nor sent again as writes).
func (r *router) retry(ctx context.Context, pl *plan, l *lease, err error, query string) bool {
	if ctx.Err() != nil || !pl.read {
		return false
	}
	n := l.p.node
	switch {
	case l.replica && sqlstate.Of(err) == sqlstate.ReadOnlyTx:
		if query == "" {
			return false
		}
		// The classifier thought it a read; the replica disagreed.
		r.refused.Add(query, 0)
		r.metrics.readOnlyRetries.Add(1)
		pl.onPrimary, pl.read, pl.capture = true, false, true
		return true
	case l.replica && sqlstate.ConnLost(err):
		if pl.retried&retriedReplica != 0 {
			return false
		}
		pl.retried |= retriedReplica
		n.markSuspect()
		r.metrics.connLostRetries.Add(1)
		pl.tried.add(n.idx)
		pl.anew()
		return true
	case l.replica && sqlstate.RecoveryConflict(err):
		pl.tried.add(n.idx)
		if pl.retried&retriedReplica == 0 && pl.replicas(false) != 0 {
			pl.retried |= retriedReplica
			r.metrics.conflictRetries.Add(1)
			pl.anew()
			return true
		}
		if pl.fallback == FallbackError || pl.conflicted {
			return false
		}
		r.metrics.conflictRetries.Add(1)
		pl.conflicted = true
		if query != "" {
			r.conflicting.Add(query, conflictMemory)
		}
		return true
	case !l.replica && pl.primaryResends < maxPrimaryResends && sqlstate.ServerGone(err):
		// The connection died with its server (the pool drops its
		// siblings); the topology may know better by now.
		pl.primaryResends++
		n.markSuspect()
		r.metrics.connLostRetries.Add(1)
		pl.topo = r.topo.Load()
		return true
	}
	return false
}

// maxPrimaryResends is how often a read whose primary connection died
// with its server is sent again. More than once: a pooler or proxy being
// stopped still accepts a connection for a few milliseconds, and the
// connection dialled after the first failure dies too (PgBouncer's
// immediate shutdown did so in 1 of 4 runs of TestPrimaryPoolerOutage).
// Once the port refuses, the borrow waits for the primary instead
// (awaitPrimary), so further failures would mean a server that accepts
// and dies on every statement: three is enough to tell.
const maxPrimaryResends = 3

// avoidConflicts sends a read whose statement kept conflicting with
// replay on the replicas lately straight to the primary, as a fallback
// read, when its requirement allows one. Most applications never have
// such a statement: then this is one atomic load.
func (r *router) avoidConflicts(pl *plan, query string) {
	if !pl.read || pl.onPrimary || pl.conflicted || query == "" || pl.fallback == FallbackError || !r.conflicting.Has(query) {
		return
	}
	pl.conflicted = true
	r.metrics.conflictsAvoided.Add(1)
}

// conflictMemory is how long a statement that conflicted with replay on
// the replicas goes to the primary: about as long as a long report runs
// while vacuum cleans behind it. Then it is tried on a replica again.
const conflictMemory = time.Minute
