package checker

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/pgreplicapgx"
)

// TargetPgx's paths: the same statements as the database/sql paths, through
// the pgx-native handle's Exec, QueryRow and transactions, and reads in a
// batch (pathBatch), which the database/sql paths have no equivalent of.

// openPgx opens the handle of TargetPgx and checks it answers.
func openPgx(ctx context.Context, dsn string) (*pgreplicapgx.Pool, error) {
	p, err := pgreplicapgx.New(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("checker: opening pgreplicapgx: %w", err)
	}
	if err := p.Ping(ctx); err != nil {
		p.Close()
		return nil, fmt.Errorf("checker: connecting with pgreplicapgx: %w", err)
	}
	return p, nil
}

func (c *client) writePgx(ctx context.Context, key Key, version int, path string, op *Op) error {
	p := c.r.pgx
	switch path {
	case pathExec:
		return c.updatePgx(ctx, p.Exec, key, version)
	case pathReturning:
		var port int
		err := p.QueryRow(ctx, c.st.returning, key.Owner, key.N, version).Scan(&port)
		op.Node = c.node(port)
		return err
	case pathTx:
		tx, err := p.Begin(ctx)
		if err != nil {
			return err
		}
		if err := c.updatePgx(ctx, tx.Exec, key, version); err != nil {
			return errors.Join(err, tx.Rollback(ctx))
		}
		return tx.Commit(ctx)
	}
	return fmt.Errorf("checker: unknown write path %q", path)
}

// updatePgx runs the UPDATE through exec and checks it hit the row.
func (c *client) updatePgx(ctx context.Context, exec func(context.Context, string, ...any) (pgconn.CommandTag, error), key Key, version int) error {
	tag, err := exec(ctx, c.st.update, key.Owner, key.N, version)
	if err != nil {
		return err
	}
	if n := tag.RowsAffected(); n != 1 {
		return fmt.Errorf("updated %d rows, want 1", n)
	}
	return nil
}

func (c *client) readPgx(ctx context.Context, key Key, path string, dest ...any) error {
	p := c.r.pgx
	switch path {
	case pathQuery:
		return p.QueryRow(ctx, c.st.read, key.Owner, key.N).Scan(dest...)
	case pathPrimary:
		return p.QueryRow(pgreplica.WithPrimary(ctx), c.st.read, key.Owner, key.N).Scan(dest...)
	case pathReadTx:
		tx, err := p.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
		if err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, c.st.read, key.Owner, key.N).Scan(dest...); err != nil {
			return errors.Join(err, tx.Rollback(ctx))
		}
		return tx.Commit(ctx)
	case pathBatch:
		b := &pgx.Batch{}
		b.Queue(c.st.read, key.Owner, key.N).QueryRow(func(r pgx.Row) error { return r.Scan(dest...) })
		b.Queue("SELECT 1")
		return p.SendBatch(ctx, b).Close()
	}
	return fmt.Errorf("checker: unknown read path %q", path)
}
