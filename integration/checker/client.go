package checker

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/pgreplica/pgreplica"
)

// Ways to write and to read; the workload rotates through them so every
// LSN-capture path of the driver (pipelined Exec, a write through Query,
// a read-write transaction's Commit) and both read paths are exercised.
const (
	pathExec      = "exec"      // UPDATE through ExecContext
	pathReturning = "returning" // UPDATE … RETURNING through QueryRowContext
	pathTx        = "tx"        // UPDATE in a read-write transaction
	pathQuery     = "query"     // SELECT through QueryRowContext
	pathPrimary   = "primary"   // SELECT through QueryRowContext on the primary (WithPrimary; the naive router's writer)
	pathReadTx    = "ro-tx"     // SELECT in a read-only transaction
	pathBatch     = "batch"     // SELECT in a pgx batch of reads (TargetPgx only)
)

// opTimeout bounds one operation; the driver's wait budget is far lower,
// so hitting it means something hangs.
const opTimeout = 30 * time.Second

// client runs one workload session's operations and records them.
type client struct {
	id      int
	r       *router
	st      statements
	session *pgreplica.Session // nil for the naive router
	nodes   map[int]int        // port → node
	primary int                // the primary's node index
}

// node maps a server port to a node index (-1 if unknown).
func (c *client) node(port int) int {
	if n, ok := c.nodes[port]; ok {
		return n
	}
	return -1
}

// write sets row key to version.
func (c *client) write(ctx context.Context, key Key, version int, path string) Op {
	op := Op{Session: c.id, Kind: OpWrite, Path: path, Role: "write", Key: key, Version: version, Node: -1}
	ctx, cancel := context.WithTimeout(c.r.withRequirement(ctx, c.session, key.Owner == c.id), opTimeout)
	defer cancel()
	op.InSession = pgreplica.SessionFrom(ctx) != nil
	op.WatermarkBefore = c.session.LSN()
	op.Start = time.Now()
	var err error
	switch {
	case c.r.pgx != nil:
		err = c.writePgx(ctx, key, version, path, &op)
	case path == pathExec:
		err = c.update(ctx, c.r.writer, key, version)
	case path == pathReturning:
		var port int
		err = c.r.writer.QueryRowContext(ctx, c.st.returning, key.Owner, key.N, version).Scan(&port)
		op.Node = c.node(port)
	case path == pathTx:
		err = c.writeTx(ctx, key, version)
	default:
		err = fmt.Errorf("checker: unknown write path %q", path)
	}
	op.End = time.Now()
	op.WatermarkAfter = c.session.LSN()
	if err != nil {
		op.Err = fmt.Errorf("write %s v%d (%s): %w", key, version, path, err)
	}
	return op
}

type execer interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}

// update runs the UPDATE and checks it hit the row.
func (c *client) update(ctx context.Context, db execer, key Key, version int) error {
	res, err := db.ExecContext(ctx, c.st.update, key.Owner, key.N, version)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("updated %d rows, want 1", n)
	}
	return nil
}

func (c *client) writeTx(ctx context.Context, key Key, version int) error {
	tx, err := c.r.writer.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := c.update(ctx, tx, key, version); err != nil {
		return errors.Join(err, tx.Rollback())
	}
	return tx.Commit()
}

// read reads row key; role says why (see Op.Role).
func (c *client) read(ctx context.Context, key Key, path, role string) Op {
	op := Op{Session: c.id, Kind: OpRead, Path: path, Role: role, Key: key, Node: -1}
	ctx, cancel := context.WithTimeout(c.r.withRequirement(ctx, c.session, key.Owner == c.id), opTimeout)
	defer cancel()
	op.InSession = pgreplica.SessionFrom(ctx) != nil
	var (
		port   int
		replay sql.NullString
		err    error
	)
	op.WatermarkBefore = c.session.LSN()
	op.Start = time.Now()
	switch {
	case c.r.pgx != nil:
		err = c.readPgx(ctx, key, path, &op.Version, &port, &replay)
	case path == pathQuery:
		err = c.r.reader().QueryRowContext(ctx, c.st.read, key.Owner, key.N).Scan(&op.Version, &port, &replay)
	case path == pathPrimary:
		err = c.r.writer.QueryRowContext(pgreplica.WithPrimary(ctx), c.st.read, key.Owner, key.N).Scan(&op.Version, &port, &replay)
	case path == pathReadTx:
		err = c.readTx(ctx, c.r.reader(), key, &op.Version, &port, &replay)
	default:
		err = fmt.Errorf("checker: unknown read path %q", path)
	}
	op.End = time.Now()
	op.WatermarkAfter = c.session.LSN()
	op.Node = c.node(port)
	if err == nil && replay.Valid {
		op.ReplayLSN, err = pgreplica.ParseLSN(replay.String)
	}
	if err != nil {
		op.Err = fmt.Errorf("read %s (%s, %s): %w", key, role, path, err)
	}
	return op
}

func (c *client) readTx(ctx context.Context, db *sql.DB, key Key, dest ...any) error {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return err
	}
	if err := tx.QueryRowContext(ctx, c.st.read, key.Owner, key.N).Scan(dest...); err != nil {
		return errors.Join(err, tx.Rollback())
	}
	return tx.Commit()
}
