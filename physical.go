package pgreplica

import (
	"context"
	"database/sql/driver"
	"sync"
	"sync/atomic"

	"github.com/jackc/puddle/v2"

	"github.com/pgreplica/pgreplica/internal/inner"
	"github.com/pgreplica/pgreplica/internal/keptstmt"
	"github.com/pgreplica/pgreplica/internal/monoclock"
	"github.com/pgreplica/pgreplica/internal/sockpeek"
	"github.com/pgreplica/pgreplica/internal/stmtclass"
)

// A physical connection: one server connection of the inner driver, as the
// pools lend it, what a statement run on it does to its session, the
// sockets the inner driver dialed for it, and the statements it keeps
// prepared from one transaction to the next (internal/keptstmt).

// physical is one server connection of the inner driver. What every
// borrow reads and writes comes first, in one cache line.
type physical struct {
	conn driver.Conn
	node *node
	// owner says who holds the connection: the pool (ownerPool), a
	// borrower (ownerBorrower, set by acquire), or, once Close took it from
	// a borrower that never gave it back, nobody (ownerOrphan). res is the
	// resource a borrower holds, for Close.
	owner atomic.Int32
	res   *puddle.Resource[*physical]
	// created and returned are when it was made and last given back, and
	// lent when it was last lent (the lease's start): a borrow checks its
	// age and idle time, and starts its lease, with one clock read.
	created, returned, lent monoclock.Time
	// valid is conn as a driver.Validator, if it is one (asserted once:
	// every borrow and return asks it).
	valid driver.Validator

	// dirty is set when a statement changed session state (SET, temp
	// tables, LISTEN, ...): the connection is closed rather than reused.
	dirty bool
	// asyncCommit is set once this session may commit asynchronously
	// (synchronous_commit changed), which changes how a write's LSN is read.
	asyncCommit bool
	// idle: counted in its pool's idle (given back, not lent since).
	idle bool
	// hedge is the connection's hedging state once a read used it: a
	// *hedgeSlot (hedge.go), which the connection keeps for the router
	// without knowing it (atomic: the connector's hedgeWatch looks at it).
	hedge atomic.Value
	// wire is what the router needs beyond database/sql's interfaces.
	wire wire
	// srv is the server the connection reached (server.go);
	// madeInRecovery says it was a replica then: behind an address that
	// names the primary (an HAProxy writer port during a failover, a
	// DNS name moved late) such a connection is not the primary's
	// (tryLeasePrimary).
	srv            *server
	madeInRecovery bool
	// stmts are the inner statements kept prepared on it.
	stmts keptstmt.Set
	// pgx records the connection's borrow by the pgx-native handle: a
	// *pgxLease (pgxdoor.go), made by its first such borrow and reused by
	// the next, which the connection keeps for that door without knowing
	// it.
	pgx any

	// socks are the sockets the inner driver dialed for this connection.
	socks *sockpeek.Sockets
	// closeOnce closes conn once: the destructor and a borrower that comes
	// back after Close may both try.
	closeOnce sync.Once
}

const (
	ownerPool int32 = iota
	ownerBorrower
	ownerOrphan
)

// closeConn closes the inner driver's connection (once).
func (p *physical) closeConn() {
	p.closeOnce.Do(func() { p.conn.Close() })
}

// note records what a statement about to run does to the session of p.
func (p *physical) note(cls stmtclass.Class) {
	if cls.SessionState {
		p.dirty = true
	}
	if cls.AsyncCommit {
		p.asyncCommit = true
	}
}

// runQuery runs a query on p.
func runQuery(ctx context.Context, p *physical, query string, args []driver.NamedValue, cls stmtclass.Class) (driver.Rows, error) {
	p.note(cls)
	return inner.Query(ctx, p.conn, query, args)
}

// prepareStmt returns an inner statement for query on p: the one p keeps
// (keptstmt), or a new one, kept from now on.
func (p *physical) prepareStmt(ctx context.Context, query string) (driver.Stmt, error) {
	if st := p.stmts.Take(query); st != nil {
		return st, nil
	}
	st, err := inner.Prepare(ctx, p.conn, query)
	if err == nil {
		p.stmts.Keep(query, st)
	}
	return st, err
}

// releaseStmt gives back a statement prepareStmt returned: when the
// connection goes back to its pool (keep), p keeps it for the next
// transaction (keptstmt.Set.Release).
func (p *physical) releaseStmt(query string, st driver.Stmt, keep bool) error {
	return p.stmts.Release(query, st, keep)
}

// knownReplay is what connection p's server is known to have replayed.
func (p *physical) knownReplay() LSN {
	n := p.node
	if !n.perConn.Load() {
		return LSN(n.replay.Load())
	}
	if p.srv == nil || n.pooled.Load() {
		return 0
	}
	return LSN(p.srv.replay.Load())
}

// servedBy is the server a read on p ran on, as far as is known: nil
// behind a pooler, which may have sent it to any backend.
func (p *physical) servedBy() *server {
	if p.node.pooled.Load() {
		return nil
	}
	return p.srv
}

// affine reports whether p may serve a session's read without a bound on
// the session's last read (plan.prefer), which ran on srv at since: p
// reaches that server, in the same incarnation, and is older than the read. Replay
// only moves forward there, so the read cannot see less. Never behind a
// pooler, whose connection reaches whichever backend it is given.
func (p *physical) affine(srv *server, since monoclock.Time) bool {
	// At or before: the last read's own connection was made no later
	// than that read started, and two clock readings may be equal.
	return !p.node.pooled.Load() && p.srv == srv && p.created <= since
}
