package pgreplica

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/pgreplica/pgreplica/internal/sqlstate"
)

// The one retry policy of both front doors (route for the driver and for
// the pgx handle, guardedRead for the handle's reads with their check in
// flight): what a read that failed before returning anything does next,
// and the statements it remembers the replicas would not serve
// (statementSet). A write is never sent twice.

// retried is what a statement's retries have spent (plan.retried).
type retried uint8

const (
	// retriedReplica: the read went to another replica after a replay
	// conflict or a lost connection.
	retriedReplica retried = 1 << iota
	// retriedPrimary: the read went to the primary again after its
	// connection died with the server.
	retriedPrimary
)

// retry reports whether the read that failed on l with err is sent again,
// having changed pl to say where:
//
//   - a replica refused it as a write (SQLSTATE 25006): to the primary as
//     a write, and query is remembered (statementSet);
//   - a replica lost the connection: once to another replica;
//   - a replica cancelled it for a replay conflict: once to another
//     replica, then, as other replicas replay the same WAL, to the
//     primary as a fallback read when the requirement allows one (and
//     query is remembered for conflictMemory);
//   - the primary's connection died with its server: once more, on the
//     primary the topology knows by then.
//
// query is the client's statement text, "" for a batch or a transaction
// (those are not remembered, nor sent again as writes).
func (c *Connector) retry(ctx context.Context, pl *plan, l *lease, err error, query string) bool {
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
		c.refused.add(query, 0)
		c.metrics.readOnlyRetries.Add(1)
		pl.onPrimary, pl.read, pl.capture = true, false, true
		return true
	case l.replica && sqlstate.ConnLost(err):
		if pl.retried&retriedReplica != 0 {
			return false
		}
		pl.retried |= retriedReplica
		n.markSuspect()
		c.metrics.connLostRetries.Add(1)
		pl.tried.add(n.idx)
		pl.anew()
		return true
	case l.replica && sqlstate.RecoveryConflict(err):
		pl.tried.add(n.idx)
		if pl.retried&retriedReplica == 0 && pl.replicas(false) != 0 {
			pl.retried |= retriedReplica
			c.metrics.conflictRetries.Add(1)
			pl.anew()
			return true
		}
		if pl.fallback == FallbackError || pl.conflicted {
			return false
		}
		c.metrics.conflictRetries.Add(1)
		pl.conflicted = true
		if query != "" {
			c.conflicting.add(query, monoNow()+mono(conflictMemory))
		}
		return true
	case !l.replica && pl.retried&retriedPrimary == 0 && sqlstate.ServerGone(err):
		// The connection died with its server (the pool drops its
		// siblings); the topology may know better by now.
		pl.retried |= retriedPrimary
		n.markSuspect()
		c.metrics.connLostRetries.Add(1)
		pl.topo = c.topo.Load()
		return true
	}
	return false
}

// avoidConflicts sends a read whose statement kept conflicting with
// replay on the replicas lately straight to the primary, as a fallback
// read, when its requirement allows one. Most applications never have
// such a statement: then this is one atomic load.
func (c *Connector) avoidConflicts(pl *plan, query string) {
	if !pl.read || pl.onPrimary || pl.conflicted || query == "" || pl.fallback == FallbackError || !c.conflicting.has(query) {
		return
	}
	pl.conflicted = true
	c.metrics.conflictsAvoided.Add(1)
}

// statementSet remembers statements the replicas would not serve, so the
// next run of each goes to the primary at once: those a replica refused as
// writes (SQLSTATE 25006, "cannot execute … in a read-only transaction")
// although the classifier took them for reads, kept for good, and those
// that kept conflicting with replay (retry.go), kept for conflictMemory.
// A bounded set of statement texts, read lock-free on every query and
// written rarely (copy on write); when full it starts over: a forgotten
// statement only costs one more retry.
type statementSet struct {
	// any is set once a statement was added: until then (for most
	// applications, always) has reads no map.
	any atomic.Bool
	max int32 // beside any: the set takes 16 bytes of the connector's hot lines
	// m maps a statement to when it is forgotten (0: never).
	m atomic.Pointer[map[string]mono]
}

// conflictMemory is how long a statement that conflicted with replay on
// the replicas goes to the primary: about as long as a long report runs
// while vacuum cleans behind it. Then it is tried on a replica again.
const conflictMemory = time.Minute

// init readies an empty set of at most max statements.
func (s *statementSet) init(max int) {
	s.max = int32(max)
	s.m.Store(&map[string]mono{})
}

func (s *statementSet) has(q string) bool {
	if !s.any.Load() {
		return false
	}
	until, ok := (*s.m.Load())[q]
	return ok && (until == 0 || monoNow() < until)
}

// add remembers q until the given time (0: for good).
func (s *statementSet) add(q string, until mono) {
	for {
		old := s.m.Load()
		if u, ok := (*old)[q]; ok && (u == 0 || u >= until && until != 0) {
			return
		}
		next := make(map[string]mono, len(*old)+1)
		if len(*old) < int(s.max) {
			now := monoNow()
			for k, u := range *old {
				if u == 0 || now < u {
					next[k] = u
				}
			}
		}
		next[q] = until
		if s.m.CompareAndSwap(old, &next) {
			s.any.Store(true)
			return
		}
	}
}
