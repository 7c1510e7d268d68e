package pgreplica

import (
	"context"
	"database/sql/driver"
)

// stmt is a prepared statement of a virtual conn: it keeps the text and its
// classification and is routed like a plain call each time it runs. The
// inner driver prepares it lazily on whichever physical conn runs it (pgx
// caches prepared statements per connection).
type stmt struct {
	cn    *conn
	query string
	cls   stmtClass
}

var (
	_ driver.Stmt             = (*stmt)(nil)
	_ driver.StmtExecContext  = (*stmt)(nil)
	_ driver.StmtQueryContext = (*stmt)(nil)
)

func (s *stmt) Close() error { return nil }

// NumInput returns -1: the inner driver checks the argument count.
func (s *stmt) NumInput() int { return -1 }

func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	return s.cn.exec(ctx, s.query, s.cls, args)
}

func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	return s.cn.query(ctx, s.query, s.cls, args)
}

func (s *stmt) Exec(args []driver.Value) (driver.Result, error) {
	return s.ExecContext(context.Background(), named(args))
}

func (s *stmt) Query(args []driver.Value) (driver.Rows, error) {
	return s.QueryContext(context.Background(), named(args))
}

func named(args []driver.Value) []driver.NamedValue {
	nv := make([]driver.NamedValue, len(args))
	for i, v := range args {
		nv[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
	}
	return nv
}
