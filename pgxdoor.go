package pgreplica

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/pgreplica/pgreplica/internal/pgxroute"
	"github.com/pgreplica/pgreplica/internal/stmtclass"
)

// The pgx-native front door (package pgreplicapgx) reaches the routing
// core through internal/pgxroute: registered here once, like the
// database/sql driver, so the core stays unexported and there is one
// router for both front doors.
func init() {
	pgxroute.Register(func(v any) (pgxroute.Router, bool) {
		c, ok := v.(*Connector)
		if !ok || c == nil || c.cfg.Driver == DriverPq {
			return nil, false
		}
		return pgxRouter{c}, true
	})
}

// pgxRouter is a Connector seen by the pgx-native handle.
type pgxRouter struct{ c *Connector }

func (r pgxRouter) Start(ctx context.Context) error { return r.c.start(ctx) }

// class classifies a request as the driver classifies the same call: a
// statement through Query as QueryContext does, Exec as ExecContext, a
// batch by its statements (a read only when every one is), COPY as a
// write, transactions as BeginTx.
func (r pgxRouter) class(req pgxroute.Request) (cls stmtclass.Class, query string) {
	c := r.c
	switch req.Kind {
	case pgxroute.Query:
		cls = c.classes.Classify(req.SQL)
		routeClass(&c.refused, req.SQL, &cls)
		return cls, req.SQL
	case pgxroute.Exec:
		return onPrimary(c.classes.Classify(req.SQL)), ""
	case pgxroute.Batch:
		return r.batchClass(req.Batch), ""
	case pgxroute.Copy:
		return onPrimary(stmtclass.Class{}), ""
	case pgxroute.ReadOnlyTx:
		return stmtclass.Class{Read: true}, "" // BEGIN itself may be sent twice
	default: // Tx, TxBatch, Pin, Ping: the primary; nothing to capture yet
		return onPrimary(stmtclass.Class{NoWAL: true}), ""
	}
}

// batchClass combines the classes of a batch's statements: it is a read
// only if each is, and goes to the primary as soon as one must.
func (r pgxRouter) batchClass(sqls []string) stmtclass.Class {
	b := stmtclass.Class{Read: len(sqls) > 0, NoWAL: true}
	for _, q := range sqls {
		cls := r.c.classes.Classify(q)
		routeClass(&r.c.refused, q, &cls)
		b.Read = b.Read && cls.Read && cls.Hint != stmtclass.HintPrimary
		b.NoWAL = b.NoWAL && (cls.Read || cls.NoWAL)
		b.SessionState = b.SessionState || cls.SessionState
		b.AsyncCommit = b.AsyncCommit || cls.AsyncCommit
	}
	if !b.Read || b.SessionState {
		b = onPrimary(b)
		b.Read = false
	}
	return b
}

func (r pgxRouter) Route(ctx context.Context, req pgxroute.Request, op pgxroute.Op) (pgxroute.Lease, error) {
	c := r.c
	if c.closed.Load() {
		return pgxroute.Lease{}, ErrClosed
	}
	cls, query := r.class(req)
	if req.Kind == pgxroute.Ping {
		if err := c.privilegeErr(c.topo.Load()); err != nil {
			return pgxroute.Lease{}, err
		}
	}
	// The plan stays here; the lease keeps what Done needs of it.
	var pl plan
	if err := c.planFor(ctx, cls, &pl); err != nil {
		return pgxroute.Lease{}, err
	}
	if pl.replicated > 0 && !pl.read {
		// Refused rather than ignored: the caller asked for durability
		// this door cannot wait for yet.
		return pgxroute.Lease{}, errReplicatedPgx
	}
	pl.tx = req.Kind == pgxroute.ReadOnlyTx
	var l lease
	var err error
	switch req.Kind {
	case pgxroute.Tx, pgxroute.TxBatch, pgxroute.Pin, pgxroute.Ping:
		// As the driver's BeginTx and Ping: the primary, never sent twice.
		if l, err = c.leasePrimary(ctx, pl.topo, false); err != nil {
			return pgxroute.Lease{}, err
		}
		if err := op.Run(pgxConnOf(l.p.conn)); err != nil {
			l.release(err)
			return pgxroute.Lease{}, err
		}
		return newPgxLease(&pl, l, req.Kind), nil
	}
	// A query's op may be hedged, or run behind its replay check in its
	// own flight (route runs it in flight); it holds the results for the caller.
	st := &statement{query: query, cls: cls}
	if req.Kind == pgxroute.Query && pl.read {
		st.hedge = req.Hedge
	}
	if guardable(req.Kind) {
		st.guard = req.Guarded
	}
	l, err = c.route(ctx, &pl, st, func(_ context.Context, p *physical) error {
		p.note(cls)
		return op.Run(pgxConnOf(p.conn))
	})
	if err != nil {
		return pgxroute.Lease{}, err
	}
	return newPgxLease(&pl, l, req.Kind), nil
}

// guardable reports whether a request of kind k may carry its freshness
// check in its own flight (GuardedOp): the reads a replica serves.
func guardable(k pgxroute.Kind) bool {
	return k == pgxroute.Query || k == pgxroute.Batch || k == pgxroute.ReadOnlyTx
}

// pgxLease is the record of a lease handed to the pgx-native handle
// (pgxroute.Borrow), with what its Done needs of the plan (done: the
// rest of the plan is not kept). Each connection keeps one (physical.pgx),
// made by its first borrow and reused by every borrow after, so that a
// read allocates no lease; gen counts the borrows, and the handle's
// generation lets only its own borrow's first Done through.
type pgxLease struct {
	l     lease
	done  planDone
	tx    bool
	wrote bool
	gen   atomic.Uint64
}

// newPgxLease records lease l, under plan pl, in its connection's
// pgxLease and returns the handle on it.
func newPgxLease(pl *plan, l lease, k pgxroute.Kind) pgxroute.Lease {
	b, _ := l.p.pgx.(*pgxLease)
	if b == nil {
		b = new(pgxLease)
		l.p.pgx = b
	}
	b.l, b.done, b.wrote = l, pl.doneOf(), false
	b.tx = k == pgxroute.Tx || k == pgxroute.ReadOnlyTx || k == pgxroute.TxBatch
	return pgxroute.NewLease(b, b.gen.Add(1))
}

func (l *pgxLease) Conn() *pgx.Conn { return pgxConnOf(l.l.p.conn) }
func (l *pgxLease) Replica() bool   { return l.l.replica }

func (l *pgxLease) Note(sql string) bool {
	cls := l.l.c.classes.Classify(sql)
	l.l.p.note(cls)
	return !cls.Read && !cls.NoWAL
}

func (l *pgxLease) Dirty() { l.l.p.dirty = true }

func (l *pgxLease) Wrote() {
	l.wrote = true
	pl := l.done.plan()
	l.l.c.wrote(&pl, l.l.p, false) // an asynchronous commit is known from the session (physical.note)
}

func (l *pgxLease) WriteFailed(err error) error { return l.l.c.writeFailed(l.l.p, err) }

func (l *pgxLease) Done(gen uint64, err error) {
	if !l.gen.CompareAndSwap(gen, gen+1) {
		return // ended already: the connection may be another's now
	}
	c := l.l.c
	if err == nil && (!l.tx || !l.wrote) {
		pl := l.done.plan()
		switch {
		case !l.tx:
			c.finish(&pl, &l.l)
		default:
			c.boundRead(&pl, &l.l, 0)
		}
	}
	l.l.endCheckTx(&err) // before notIdle looks at the transaction status
	l.l.release(notIdle(l.l.p.conn, err))
}
