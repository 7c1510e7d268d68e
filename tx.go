package pgreplica

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"

	"github.com/jackc/puddle/v2"
)

// tx is a transaction pinned to one physical connection: the primary for
// read-write transactions, one fresh-enough replica for read-only ones.
type tx struct {
	cn      *conn
	res     *puddle.Resource[*physical]
	inner   driver.Tx
	ctx     context.Context
	replica bool
	// wrote is set when a statement that is not provably a read ran, so
	// Commit captures the commit's LSN.
	wrote bool
	// asyncCommit is set when the transaction changed synchronous_commit.
	asyncCommit bool
}

// BeginTx starts a transaction. Read-only transactions below SERIALIZABLE
// go to one replica that satisfies the context's requirement, checked
// before BEGIN; everything else goes to the primary. (A standby rejects
// SERIALIZABLE, even READ ONLY DEFERRABLE.)
func (cn *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if cn.closed {
		return nil, driver.ErrBadConn
	}
	if cn.tx != nil {
		return nil, errors.New("pgreplica: transaction already in progress")
	}
	iso := sql.IsolationLevel(opts.Isolation)
	onReplica := opts.ReadOnly && iso != sql.LevelSerializable && iso != sql.LevelLinearizable
	res := cn.pinned
	t := &tx{cn: cn, ctx: ctx}
	if res == nil {
		var err error
		if onReplica {
			var onRep bool
			res, onRep, err = cn.c.acquireForReadTx(ctx)
			t.replica = onRep
		} else {
			res, err = cn.c.acquirePrimary(ctx)
		}
		if err != nil {
			return nil, err
		}
	}
	t.res = res
	inner, err := beginInner(ctx, res.Value().conn, opts)
	if err != nil {
		t.release(err)
		return nil, err
	}
	t.inner = inner
	cn.tx = t
	return t, nil
}

func beginInner(ctx context.Context, c driver.Conn, opts driver.TxOptions) (driver.Tx, error) {
	if b, ok := c.(driver.ConnBeginTx); ok {
		return b.BeginTx(ctx, opts)
	}
	//lint:ignore SA1019 the fallback for inner drivers without ConnBeginTx
	return c.Begin()
}

func (t *tx) noteStatement(cls stmtClass) {
	if !cls.read && !cls.noWAL {
		t.wrote = true
	}
	if cls.asyncCommit {
		t.asyncCommit = true
	}
}

// Commit commits and, for a transaction that wrote, raises the session and
// process watermarks to an LSN read after the commit.
func (t *tx) Commit() error {
	if t.res == nil {
		return errTxDone
	}
	p := t.res.Value()
	var err error
	if t.wrote && !t.replica {
		err = t.cn.c.commitCapture(t.ctx, p, t.inner, t.asyncCommit || p.asyncCommit)
		err = t.cn.c.writeFailed(p.node, err)
	} else {
		err = t.inner.Commit()
	}
	t.release(t.afterReplicaTx(err))
	return err
}

func (t *tx) Rollback() error {
	if t.res == nil {
		return errTxDone
	}
	err := t.inner.Rollback()
	t.release(t.afterReplicaTx(err))
	return err
}

// afterReplicaTx raises the session past every snapshot a transaction
// that only read used: on a replica (advanceAfterRead) or on the primary
// (advanceAfterPrimaryRead).
func (t *tx) afterReplicaTx(err error) error {
	sess := SessionFrom(t.ctx)
	if err != nil || sess == nil || t.wrote {
		return err // a commit that wrote advanced the session already
	}
	if t.replica {
		return t.cn.c.advanceAfterRead(t.ctx, t.res.Value(), sess)
	}
	return t.cn.c.advanceAfterPrimaryRead(t.ctx, t.res.Value(), sess)
}

// release ends the pin; a pinned session conn keeps its connection.
func (t *tx) release(err error) {
	res := t.res
	t.res = nil
	t.cn.tx = nil
	if res == t.cn.pinned {
		return
	}
	t.cn.closeBound(res)
	res.Value().node.pool.release(res, err)
}
