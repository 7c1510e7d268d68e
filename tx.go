package pgreplica

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"

	"github.com/pgreplica/pgreplica/internal/sqlstate"
	"github.com/pgreplica/pgreplica/internal/stmtclass"
)

// tx is a transaction pinned to one physical connection: the primary for
// read-write transactions, one fresh-enough replica for read-only ones.
type tx struct {
	cn    *conn
	lease lease // zero once the transaction ended
	inner driver.Tx
	// pl is the transaction's plan: where it runs and for which session.
	pl plan
	// wrote is set when a statement that is not provably a read ran, so
	// Commit captures the commit's LSN.
	wrote bool
	// asyncCommit is set when the transaction changed synchronous_commit.
	asyncCommit bool
	// ctx is BeginTx's, kept only when its writes wait for replicas
	// (WithReplicated): Commit has none of its own.
	ctx context.Context
	// opts are BeginTx's, for beginAgain; used is set once a statement
	// was sent in the transaction, through any path (noteStatement).
	opts driver.TxOptions
	used bool
	// snapshot: READ ONLY below SERIALIZABLE, whose reads stand without
	// their COMMIT (a serializable one's are certified only by it).
	snapshot bool
}

// BeginTx starts a transaction. Read-only transactions below SERIALIZABLE
// go to one replica that satisfies the context's requirement, checked
// before BEGIN (under REPEATABLE READ the first statement fixes the
// snapshot, so the check must come first), with the same wait and
// fallback as a single read; everything else goes to the primary. (A
// standby rejects SERIALIZABLE, even READ ONLY DEFERRABLE.)
func (cn *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if cn.closed {
		return nil, driver.ErrBadConn
	}
	if cn.tx != nil {
		return nil, errors.New("pgreplica: transaction already in progress")
	}
	iso := sql.IsolationLevel(opts.Isolation)
	cls := stmtclass.Class{Read: opts.ReadOnly} // BEGIN itself may be sent twice
	if !opts.ReadOnly || iso == sql.LevelSerializable || iso == sql.LevelLinearizable {
		cls.Hint = stmtclass.HintPrimary
	}
	t := &cn.txBuf
	*t = tx{cn: cn, opts: opts, snapshot: cls.Hint != stmtclass.HintPrimary}
	if err := cn.c.planFor(ctx, cls, &t.pl); err != nil {
		return nil, err
	}
	t.pl.tx = cls.Read
	if t.pl.replicated > 0 {
		t.ctx = ctx
	}
	var err error
	switch {
	case cn.pinned != nil:
		t.lease = *cn.pinned
		err = t.begin(ctx, t.lease.p)
	case cls.Read:
		t.lease, err = cn.c.route(ctx, &t.pl, &statement{}, t.begin)
	default:
		if t.lease, err = cn.c.leasePrimary(ctx, t.pl.topo, false); err == nil {
			if err = t.begin(ctx, t.lease.p); err != nil {
				t.lease.release(err)
			}
		}
	}
	if err != nil {
		return nil, err
	}
	cn.tx = t
	return t, nil
}

func (t *tx) begin(ctx context.Context, p *physical) (err error) {
	t.inner, err = beginInner(ctx, p.conn, t.opts)
	return err
}

// beginAgain begins a read-only transaction again, where a read's retry
// policy says, when its first statement found its connection lost (a
// pooler or a server ended it after BEGIN): nothing of the transaction
// was seen yet, so beginning it elsewhere is as if it had begun there.
// It reports whether the statement may be sent again, on t's new lease.
// When the transaction cannot begin again it is over, and Rollback says
// nil: there is nothing to roll back.
func (t *tx) beginAgain(ctx context.Context, err error) bool {
	if t == nil || t.used || !t.snapshot || t.cn.pinned != nil || !sqlstate.ConnLost(err) {
		return false
	}
	c := t.cn.c
	again := c.retry(ctx, &t.pl, &t.lease, err, "")
	t.lease.release(err)
	t.lease, t.inner = lease{}, nil
	if again {
		if t.lease, err = c.route(ctx, &t.pl, &statement{}, t.begin); err == nil {
			return true
		}
	}
	t.cn.tx = nil
	return false
}

// readOnly reports a transaction that began READ ONLY below SERIALIZABLE
// and ran only reads: its COMMIT changes nothing, and the rows it read
// stand whether or not the COMMIT is answered.
func (t *tx) readOnly() bool { return t.snapshot && !t.wrote }

func beginInner(ctx context.Context, c driver.Conn, opts driver.TxOptions) (driver.Tx, error) {
	if b, ok := c.(driver.ConnBeginTx); ok {
		return b.BeginTx(ctx, opts)
	}
	//lint:ignore SA1019 the fallback for inner drivers without ConnBeginTx
	return c.Begin()
}

func (t *tx) noteStatement(cls stmtclass.Class) {
	t.used = true
	if !cls.Read && !cls.NoWAL {
		t.wrote = true
	}
	if cls.AsyncCommit {
		t.asyncCommit = true
	}
}

// Commit commits and, for a transaction that wrote, records the write
// (its position is read after the commit, deferred: see clusterMarks).
func (t *tx) Commit() (err error) {
	if t.lease.p == nil {
		return errTxDone
	}
	p := t.lease.p
	err = t.inner.Commit()
	if err != nil && t.readOnly() && sqlstate.ConnLost(err) {
		// Lost at COMMIT: the server rolled back a transaction that
		// changed nothing; what it read bounds the session as after a
		// commit.
		t.cn.c.boundRead(&t.pl, &t.lease, 0)
		t.end(err)
		return nil
	}
	if t.wrote && !t.lease.replica {
		if err == nil {
			ticket := t.cn.c.wrote(&t.pl, p, t.asyncCommit)
			if t.pl.replicated > 0 {
				defer func() { err = t.cn.c.awaitReplicated(t.ctx, &t.pl, ticket) }()
			}
		}
		err = t.cn.c.writeFailed(p, err)
	}
	t.end(err)
	return err
}

func (t *tx) Rollback() error {
	if t.lease.p == nil {
		if t.inner == nil {
			return nil // lost, and not begun again (beginAgain)
		}
		return errTxDone
	}
	err := t.inner.Rollback()
	t.end(err)
	return err
}

// end raises the session past every snapshot a transaction that only
// read used (a commit that wrote advanced it already), then ends the pin;
// a pinned session conn keeps its connection.
func (t *tx) end(err error) {
	if err == nil && !t.wrote {
		t.cn.c.boundRead(&t.pl, &t.lease, 0)
	}
	l := t.lease
	t.lease = lease{}
	t.cn.tx = nil
	if t.cn.pinned == nil {
		t.cn.closeBound(l.p)
		l.release(err)
	}
}
