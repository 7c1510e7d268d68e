package pgreplicapgx

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/pgreplica/pgreplica/internal/pgxroute"
)

// CopyFrom copies rows into a table on the primary with COPY FROM STDIN,
// as pgx does, and records the write (without a statement: its position
// is read later, shared).
func (p *Pool) CopyFrom(ctx context.Context, tableName pgx.Identifier, columnNames []string, rowSrc pgx.CopyFromSource) (int64, error) {
	var n int64
	l, err := p.route(ctx, pgxroute.Request{Kind: pgxroute.Copy}, func(c *pgx.Conn) (err error) {
		n, err = c.CopyFrom(ctx, tableName, columnNames, rowSrc)
		return err
	})
	if err != nil {
		return n, err
	}
	l.Done(nil)
	return n, nil
}
