package pgreplica

import (
	"context"
	"database/sql/driver"
	"time"

	"github.com/pgreplica/pgreplica/internal/monoclock"
	"github.com/pgreplica/pgreplica/internal/pgxroute"
	"github.com/pgreplica/pgreplica/internal/stmtclass"
)

// plan is the routing decision for one statement (or one transaction):
// computed once by decide from values, then carried by the execution path
// (route.go), which goes back to the context only for its deadline, when
// a wait needs it.
type plan struct {
	topo *topology
	// onPrimary: the statement runs on the primary. Otherwise it runs on
	// one of the replicas the selection filters accept (fresh, below), or
	// after waiting for one, or where the fallback sends it.
	onPrimary bool
	// read: the statement is a provable read, so it may be sent again
	// elsewhere when it failed before returning anything.
	read bool
	// tx: the read is a read-only transaction of the caller's.
	tx bool
	// capture: the statement writes WAL outside a transaction, so its
	// commit position is recorded.
	capture bool
	// replicated is how many replicas must show a write flushed before it
	// returns (WithReplicated).
	replicated int
	kind       readKind // the requirement that decided (metrics, logs)
	// need is the replay position a replica must have (0: none).
	need LSN
	// pending is the ticket of a write (or session read on the primary)
	// the read must see but whose position is not read yet (0: none; see
	// clusterMarks): the read goes to the primary or resolves it first
	// (readAfterWrite). pendingWriteAt is when the latest pending
	// write committed (zero: only the bound of a session's read on the
	// primary is pending, which is resolved, never sent to the primary).
	pending        uint64
	pendingWriteAt time.Time
	// later is that write's position being read beside the read's flight
	// (readAfterWrite): need holds the marks from before it until
	// settleLater.
	later *laterPos
	// maxLag bounds replicas' lag for reads without a position:
	// Config.MaxLag, or the context's staleness.
	maxLag time.Duration
	// deadline is the limit on waiting for a fresh replica: the wait
	// budget, never past the context's (a fallback slot is waited for
	// until the context's own deadline: fallbackGate.take). It
	// is set when a wait first needs it (waitDeadline), budget after at:
	// most reads wait for nothing and read no clock for it.
	deadline time.Time
	budget   time.Duration
	fallback Fallback
	zone     string
	session  *Session
	// fresh are the replicas that satisfy the read now, the client's
	// zone first (see plan.replicas); tried those that failed it.
	fresh nodeSet
	tried nodeSet
	// slow are the replicas the last borrow passed over for a connection
	// slow to come: not tried (a retry may use them), but no hedge goes
	// there (hedgeSlot.pick).
	slow nodeSet
	// retried is what its retries spent, primaryResends how often it was
	// sent to the primary again; conflicted: replay conflicts sent it to
	// the primary (route.go).
	retried        retried
	primaryResends uint8
	conflicted     bool
	// flightsBehind counts the checks in the read's own flight that found
	// its replica behind (runInFlight).
	flightsBehind uint8
	// unchecked: the read runs on whatever connection it is given,
	// without a check of that connection's server (a hedge).
	unchecked bool
	// prefer is the replica of the session's last read, which serves the
	// read without a bound on that read when it can (affinity), on a
	// connection older than preferSince; otherwise the read needs at
	// least lastReadBound (when known from the snapshot's samples; see
	// Connector.boundLastRead).
	prefer             *node
	preferServer       *server
	preferSince        monoclock.Time
	lastReadBound      LSN
	lastReadBoundKnown bool
	// at is when the read began to wait (set with deadline); zero while
	// it has waited for nothing.
	at time.Time
}

// waitDeadline returns the plan's deadline, setting it (and at) on first
// use from now, the wait budget and ctx's deadline.
func (pl *plan) waitDeadline(ctx context.Context) time.Time {
	if pl.deadline.IsZero() {
		dl, _ := ctx.Deadline()
		pl.setDeadline(time.Now(), dl)
	}
	return pl.deadline
}

func (pl *plan) setDeadline(now, ctxDeadline time.Time) {
	pl.at, pl.deadline = now, now.Add(pl.budget)
	if !ctxDeadline.IsZero() && ctxDeadline.Before(pl.deadline) {
		pl.deadline = ctxDeadline
	}
}

// anew readies the plan for a retry on another replica: the first
// attempt ran for as long as it took to fail, which the wait for a fresh
// replica is not to pay for; the retry gets a budget of its own (within
// the context's deadline), and the replicas fresh now.
func (pl *plan) anew() {
	pl.deadline, pl.at = time.Time{}, time.Time{}
	pl.fresh = pl.replicas(true)
}

// waited is how long the read has waited (0 when it waited for nothing).
func (pl *plan) waited() time.Duration {
	if pl.at.IsZero() {
		return 0
	}
	return time.Since(pl.at)
}

// decide turns a statement into a plan, written to pl: a pure function
// of the topology snapshot, the statement's class, the context's
// requirement (read once by the caller), the configuration, the process
// watermarks of this cluster (read only when the requirement needs them:
// an eventual read does not), the time and the context's deadline (zero:
// none). A zero time leaves the deadline to be set when a wait first
// needs it (waitDeadline), as the router does.
func (pl *plan) decide(t *topology, cls stmtclass.Class, req *requirement, cfg *settings, process func() processLSNs, now, ctxDeadline time.Time) error {
	*pl = plan{
		topo:     t,
		read:     cls.Read,
		capture:  !cls.Read && !cls.NoWAL,
		budget:   cfg.waitBudget,
		fallback: req.fallbackOr(cfg.fallback),
		zone:     cfg.zone,
	}
	if !now.IsZero() {
		pl.setDeadline(now, ctxDeadline)
	}
	if req != nil {
		pl.session, pl.replicated = req.session, req.replicated
	}

	// Where: writes and statements that must be current go to the primary.
	if cls.Hint == stmtclass.HintPrimary || !cls.Read && cls.Hint != stmtclass.HintReplica {
		pl.onPrimary, pl.kind = true, readPrimary
		return nil
	}
	kind, need, err := req.decide(t.sysid)
	if err != nil {
		return err
	}
	switch {
	case kind == readDefault && cfg.consistency == ConsistencyPrimary:
		kind = readPrimary
	case kind == readDefault && cfg.consistency == ConsistencyEventual:
		kind = readEventual
	case kind == readDefault:
		p := process()
		kind, need = readPosition, p.all
		pl.pending, pl.pendingWriteAt = p.pendingAll, p.writeAt
	case kind == readPosition && cfg.consistency == ConsistencyProcess:
		// A session or token read also sees what this process wrote
		// without a session (see clusterMarks).
		p := process()
		need = max(need, p.shared)
		pl.pending, pl.pendingWriteAt = p.pendingShared, p.writeAt
	}
	if pl.pending == 0 {
		pl.pendingWriteAt = time.Time{}
	}
	if kind == readPosition && pl.session != nil {
		if st, at := pl.session.pendingFor(t.sysid); st != 0 {
			pl.pending = max(pl.pending, st)
			if at.After(pl.pendingWriteAt) {
				pl.pendingWriteAt = at
			}
		}
		// A capture that covered the session's pending ticket after its
		// watermark was read above is folded in by pendingFor, which then
		// reports nothing pending: the watermark is read again, or the
		// read would need neither the ticket nor the position it covered
		// (a read-your-writes violation, seen under Patroni).
		if lsn, ok := pl.session.lsnFor(t.sysid); ok {
			need = max(need, lsn)
		}
	}
	pl.kind, pl.need = kind, need
	switch {
	case kind == readPrimary:
		pl.onPrimary = true
		return nil
	case kind == readStaleness:
		pl.maxLag = req.maxStaleness
	case need == 0:
		// Without a position there is nothing to prove freshness with:
		// the configured lag bounds apply.
		pl.maxLag = cfg.maxLag
	}
	if kind == readPosition && pl.session != nil {
		pl.affinity(t)
	}
	pl.fresh = pl.replicas(true)
	return nil
}

// affinity sets the plan's preference for the replica of the session's
// last replica read on this cluster, and the bound on that read known from
// the snapshot: a sample of that replica, or of the primary, read after it.
func (pl *plan) affinity(t *topology) {
	n, srv, start, end := pl.session.lastRead(t.sysid)
	if n == nil {
		return
	}
	pl.prefer, pl.preferServer, pl.preferSince = n, srv, start
	if n.idx < len(t.nodes) && t.nodes[n.idx].n == n {
		// The probe's position bounds the read only when it reached the
		// server the read ran on (server.go).
		if v := &t.nodes[n.idx]; v.sent > end && v.connSince < start && v.status.err == nil && v.status.role == roleReplica && v.status.server == srv && !n.pooled.Load() {
			pl.lastReadBound, pl.lastReadBoundKnown = v.status.lsn, true
			return
		}
	}
	if p := t.primaryNode(); p != nil && p.sent > end {
		pl.lastReadBound, pl.lastReadBoundKnown = reachableLSN(p.status.lsn), true
	}
}

// planDone is what is left of a plan once its statement ran: what
// finish and boundRead need when the caller is done with the results.
type planDone struct {
	topo          *topology
	session       *Session
	read, capture bool
}

func (pl *plan) doneOf() planDone {
	return planDone{topo: pl.topo, session: pl.session, read: pl.read, capture: pl.capture}
}

// plan rebuilds the part of the plan finish and boundRead read.
func (d planDone) plan() plan {
	return plan{topo: d.topo, session: d.session, read: d.read, capture: d.capture}
}

// unproven reports whether pl is a read that needs a position which no
// replica is known to have (and none is pending: a write whose position
// is not read yet goes the driver's way).
func (pl *plan) unproven() bool {
	return pl.read && !pl.onPrimary && pl.need != 0 && pl.pending == 0 && pl.fresh.without(pl.tried) == 0
}

// tokened reports a read with a position requirement (session, token,
// process watermark): the reads whose fallback ratio warns of
// degradation first.
func (pl *plan) tokened() bool { return pl.kind == readPosition && pl.need > 0 }

// retried is what a statement's retries have spent (plan.retried).
type retried uint8

const (
	// retriedReplica: the read went to another replica after a replay
	// conflict or a lost connection.
	retriedReplica retried = 1 << iota
)

// laterPos is a write's position read on the primary beside the flight
// of a read that needs it (readAfterWrite).
type laterPos struct {
	done chan struct{}
	err  error
	m    *clusterMarks
}

// Wait returns the position once read (pgxroute.Later): the marks, which
// then cover the write.
func (lp *laterPos) Wait() (uint64, bool) {
	<-lp.done
	return lp.m.All(), lp.err == nil
}

// reject runs the per-read filters on one node and returns the first
// rejection. position decides whether the replay filter applies (it does
// not while a read waits for a replica to catch up).
func (pl *plan) reject(v *nodeView, position bool) rejection {
	switch {
	case v.excluded != rejectNone:
		return v.excluded
	case v.n.suspect.Load():
		return rejectSuspect
	case pl.tried.has(v.n.idx):
		return rejectTried
	case pl.maxLag > 0 && v.lag > pl.maxLag:
		if pl.kind == readStaleness {
			return rejectStale
		}
		return rejectLagTime
	case position && LSN(v.n.replay.Load()) < pl.need:
		return rejectBehind
	case pl.tx && pl.need > 0 && v.n.pooled.Load():
		return rejectPooledTx
	case pl.unchecked && pl.need > 0 && v.n.perConn.Load():
		// Known for the servers seen there: a connection may reach
		// another.
		return rejectUnchecked
	}
	return rejectNone
}

// replicas returns the nodes that pass every filter (the replay filter
// when position is set), the client's zone preferred: when a replica in
// zone qualifies, only those in zone are returned, and the others are not
// looked at (their counters are cache misses).
func (pl *plan) replicas(position bool) nodeSet {
	if pl.zone != "" {
		if local := pl.pass(position, true); local != 0 {
			return local
		}
	}
	return pl.pass(position, false)
}

// pass returns the eligible nodes that pass every filter, only those in
// the plan's zone when inZone is set.
func (pl *plan) pass(position, inZone bool) nodeSet {
	var ok nodeSet
	for set := pl.topo.eligible; set != 0; set &= set - 1 {
		i := set.nth(0)
		v := &pl.topo.nodes[i]
		if inZone && v.zone != pl.zone || pl.reject(v, position) != rejectNone {
			continue
		}
		ok.add(i)
	}
	return ok
}

// statement is what route runs on a leased connection, its args
// converted for that connection's driver first: the caller's op, or,
// without one, the query itself (runQuery), which route may hedge; its
// rows are left in rows. (op is route's own parameter, not a field: what
// a hedge keeps of the statement escapes to the heap, op must not, or
// every statement would allocate its closure and what that captures.)
type statement struct {
	query string // the client's query; for a read a replica refused
	args  []driver.NamedValue
	cls   stmtclass.Class
	rows  driver.Rows
	// hedge is the pgx handle's operation when it may be hedged (route's
	// op then runs it unhedged).
	hedge pgxroute.HedgeOp
	// guard is the pgx handle's operation when it may carry its replay
	// check in its own flight; inFlight says the query itself may
	// (inflight.go). A read whose replica is not known fresh then runs
	// so, once its position is known (acquire decides, route runs it).
	guard    pgxroute.GuardedOp
	inFlight bool
}

// processLSNs are a cluster's watermarks as plain values, for decide: the
// positions known and whether writes are still pending.
type processLSNs struct {
	all, shared LSN
	// pendingAll and pendingShared are the highest uncovered tickets (0:
	// none) of all writes and of writes without a Session.
	pendingAll, pendingShared uint64
	// writeAt is when the latest write committed.
	writeAt time.Time
}

// snapshotOf reads m's marks as plain values (marks.Cluster.Snapshot).
func snapshotOf(m *clusterMarks) processLSNs {
	s := m.Snapshot()
	p := processLSNs{all: LSN(s.All), shared: LSN(s.Shared), pendingAll: s.PendingAll, pendingShared: s.PendingShared}
	if s.PendingAll != 0 {
		p.writeAt = time.Unix(0, s.WriteAt)
	}
	return p
}
