// Package pgxroute is the bridge between pgreplica's routing core and its
// pgx-native handle (package pgreplicapgx): the one narrow interface
// through which the handle asks the core where a statement runs and tells
// it what happened there. The core is unexported; the root package
// registers the bridge once, at init, as database/sql drivers register
// themselves, and no other state is kept here.
package pgxroute

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/pgreplica/pgreplica/internal/pgxtrace"
)

// Kind is what a request asks of the router.
type Kind uint8

const (
	// Query is one statement whose rows the caller reads: a provable read
	// may run on a replica.
	Query Kind = iota
	// Exec is one statement whose rows nobody reads: the primary, as the
	// driver's Exec.
	Exec
	// Batch is several statements sent in one flight: one replica when
	// every one is a provable read, else the primary.
	Batch
	// Copy is COPY FROM: the primary, a write.
	Copy
	// ReadOnlyTx is a read-only transaction below SERIALIZABLE: one
	// replica that satisfies the requirement.
	ReadOnlyTx
	// Tx is any other transaction: the primary.
	Tx
	// TxBatch is a batch that begins a transaction (pgx.Batch.BeginTx):
	// the primary, as Tx; the caller classifies its statements (Note).
	TxBatch
	// Pin is a primary connection held for session state (Acquire).
	Pin
	// Ping checks that the primary answers (and the role's privileges).
	Ping
)

// Request is what a front door asks of the router.
type Request struct {
	Kind Kind
	// SQL is the statement of a Query or an Exec.
	SQL string
	// Batch holds the statements of a Batch.
	Batch []string
	// Guarded and Hedge are the request's op as a GuardedOp and a
	// HedgeOp, when it is one: set by the caller, which knows its type,
	// so that a read's path makes no type assertion (each costs a lookup
	// in the runtime's caches).
	Guarded GuardedOp
	Hedge   HedgeOp
}

// Op is what runs on the connection the router chose. A type of the
// caller's (the rows of a query) implements it, so that routing a read
// allocates no closure.
type Op interface {
	Run(c *pgx.Conn) error
}

// OpFunc is an Op of a function.
type OpFunc func(c *pgx.Conn) error

func (f OpFunc) Run(c *pgx.Conn) error { return f(c) }

// GuardedOp is the Op of a Query, a Batch or a ReadOnlyTx that can also
// run in the same flight as a check that the replica has replayed need
// (Need.Met).
// The router uses RunGuarded on a replica whose known replay position
// cannot prove it fresh, instead of a check of its own before the read (a
// round trip). It returns the replay position the check read, and
// ErrBehind (having run nothing the caller sees) when it is below need.
type GuardedOp interface {
	Op
	RunGuarded(c *pgx.Conn, need Need) (replayed uint64, err error)
}

// Need is the replay position a guarded read must find: At, and, when
// Later is set, the position of a write that is still being read on the
// primary while the read is in flight to the replica (both take one round
// trip, side by side, instead of one after the other).
type Need struct {
	At    uint64
	Later Later
	// Trace is the connection's tracer when the application set one
	// (internal/pgxtrace): the flight is traced as the application's
	// call alone.
	Trace *pgxtrace.Tracer
}

// Later is a position being read; Wait returns it once read (ok false: it
// could not be read, and the read cannot be proven on any replica).
type Later interface {
	Wait() (lsn uint64, ok bool)
}

// Met reports whether a replica whose replay position is replayed has
// what the read needs, waiting for Later when replayed reaches At.
func (n Need) Met(replayed uint64) bool {
	if replayed < n.At {
		return false
	}
	if n.Later == nil {
		return true
	}
	l, ok := n.Later.Wait()
	return ok && replayed >= l
}

// HedgeOp is the Op of a Query whose read may also be sent to a second
// replica when the first is slow to answer (a hedged read): Clone makes a
// fresh copy for the hedge, Adopt takes over the results of a copy that
// answered first, Discard drops the results of an attempt that lost.
type HedgeOp interface {
	Op
	Clone() HedgeOp
	Adopt(winner HedgeOp)
	Discard()
}

// ErrBehind is RunGuarded's answer for a replica that has not replayed the
// read's position yet.
var ErrBehind = errors.New("pgxroute: the replica has not replayed the read's position")

// Router routes for one pgreplica.Connector.
type Router interface {
	// Start starts the topology monitor and waits for its first round,
	// as the first database/sql connection does.
	Start(ctx context.Context) error
	// Route decides where the request runs, borrows a connection there
	// and runs op on it; a read that failed before returning anything is
	// sent again where it can succeed, as in the driver. On success the
	// caller owns the lease until it calls Done.
	Route(ctx context.Context, r Request, op Op) (Lease, error)
}

// Lease is one physical connection borrowed under a routing decision:
// a handle on the router's record of the borrow (Borrow), which the
// router keeps with the connection and reuses for its next borrow, so
// that a read allocates no lease. The handle carries the borrow's
// generation: Done ends the borrow once, and a Done through a handle
// whose borrow already ended does nothing, even when the connection has
// been lent again since. The other methods are valid until Done. The
// zero Lease holds nothing (Valid reports false).
type Lease struct {
	b   Borrow
	gen uint64
}

// NewLease is the router's: a handle on borrow b in its generation gen.
func NewLease(b Borrow, gen uint64) Lease { return Lease{b: b, gen: gen} }

// Valid reports whether l holds a borrow.
func (l Lease) Valid() bool { return l.b != nil }

// Conn is the connection's pgx connection.
func (l Lease) Conn() *pgx.Conn { return l.b.Conn() }

// Replica reports whether the connection is to a replica.
func (l Lease) Replica() bool { return l.b.Replica() }

// Note classifies sql, about to run on the lease (inside a transaction,
// or on a pinned connection), records what it does to the session (SET,
// LISTEN, temp tables: the connection is then closed, not reused), and
// reports whether it writes WAL.
func (l Lease) Note(sql string) (writes bool) { return l.b.Note(sql) }

// Dirty marks the connection's session as changed in ways nobody can
// tell (the caller had the raw connection): it is closed, not reused.
func (l Lease) Dirty() { l.b.Dirty() }

// Wrote records a committed write (a ticket: no statement now; its
// position is read later, shared with other writes).
func (l Lease) Wrote() { l.b.Wrote() }

// WriteFailed turns the error of a write into pgreplica's (a lost
// connection after sending: ErrWriteOutcomeUnknown) and tells the
// monitor; nil stays nil.
func (l Lease) WriteFailed(err error) error { return l.b.WriteFailed(err) }

// Done ends the lease once the caller is done with its results. With err
// nil it first does what the decision asks then: a write through Query
// or a batch is recorded; a session read (a statement, a batch of reads,
// a transaction that wrote nothing) leaves what bounds the session's
// next read. Then it gives the connection back, closing it when err says
// it is broken, when it carries session state, or when it is not idle
// (rows left open, a transaction left open). Done is idempotent.
func (l Lease) Done(err error) { l.b.Done(l.gen, err) }

// Borrow is the router's record of one borrow of a connection, behind a
// Lease: Done(gen, err) ends it only while gen is its generation.
type Borrow interface {
	Conn() *pgx.Conn
	Replica() bool
	Note(sql string) (writes bool)
	Dirty()
	Wrote()
	WriteFailed(err error) error
	Done(gen uint64, err error)
}

var open func(connector any) (Router, bool)

// Register installs the root package's bridge. It is called once, from
// the root package's init.
func Register(f func(connector any) (Router, bool)) {
	if open != nil {
		panic("pgxroute: Register called twice")
	}
	open = f
}

// For returns the router of a *pgreplica.Connector, or false for anything
// else.
func For(connector any) (Router, bool) {
	if open == nil {
		return nil, false
	}
	return open(connector)
}
