// Package inner runs statements on an inner driver's connection (lib/pq's
// or pgx stdlib's, or any database/sql driver's) through database/sql/
// driver's interfaces: exec, query and prepare by the fastest interface
// the connection offers (Exec, Query, Prepare), the conversion of
// arguments database/sql would have done (ConvertArgs), the read of one
// value (QueryLSN, QueryText), and the wrapping of the rows it answers for
// database/sql (Rows). It knows neither the router nor which driver it
// talks to: positions leave it as uint64, as with internal/probe, and the
// root package gives them its LSN type. Its tests run with
// `go test ./internal/inner/`.
package inner

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/pgreplica/pgreplica/internal/pgxtrace"
	"github.com/pgreplica/pgreplica/internal/probe"
)

// Exec runs a statement through the inner driver's fastest interface.
func Exec(ctx context.Context, c driver.Conn, query string, args []driver.NamedValue) (driver.Result, error) {
	if e, ok := c.(driver.ExecerContext); ok {
		r, err := e.ExecContext(ctx, query, args)
		if !errors.Is(err, driver.ErrSkip) {
			return r, err
		}
	}
	st, err := Prepare(ctx, c, query)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	if se, ok := st.(driver.StmtExecContext); ok {
		return se.ExecContext(ctx, args)
	}
	return nil, fmt.Errorf("pgreplica: inner statement does not implement StmtExecContext")
}

// Query runs a query through the inner driver's fastest interface.
func Query(ctx context.Context, c driver.Conn, query string, args []driver.NamedValue) (driver.Rows, error) {
	if q, ok := c.(driver.QueryerContext); ok {
		r, err := q.QueryContext(ctx, query, args)
		if !errors.Is(err, driver.ErrSkip) {
			return r, err
		}
	}
	st, err := Prepare(ctx, c, query)
	if err != nil {
		return nil, err
	}
	sq, ok := st.(driver.StmtQueryContext)
	if !ok {
		st.Close()
		return nil, fmt.Errorf("pgreplica: inner statement does not implement StmtQueryContext")
	}
	rows, err := sq.QueryContext(ctx, args)
	if err != nil {
		st.Close()
		return nil, err
	}
	return &stmtRows{Rows: rows, stmt: st}, nil
}

// Prepare prepares a statement through the inner driver's fastest
// interface.
func Prepare(ctx context.Context, c driver.Conn, query string) (driver.Stmt, error) {
	if p, ok := c.(driver.ConnPrepareContext); ok {
		return p.PrepareContext(ctx, query)
	}
	return c.Prepare(query)
}

// stmtRows closes the statement a fallback query prepared.
type stmtRows struct {
	driver.Rows
	stmt driver.Stmt
}

func (r *stmtRows) Close() error {
	err := r.Rows.Close()
	r.stmt.Close()
	return err
}

// ConvertArgs applies the connection c's own NamedValueChecker, then
// database/sql's default conversion, exactly as database/sql would have
// done had it talked to c directly. pgreplica's virtual conn accepts every
// value (it does not know yet which physical conn will run the statement),
// so the conversion happens here.
func ConvertArgs(c driver.Conn, args []driver.NamedValue) error {
	if len(args) == 0 {
		return nil // the pgx handle's statements, and any without arguments
	}
	checker, _ := c.(driver.NamedValueChecker)
	for i := range args {
		nv := &args[i]
		if checker != nil {
			err := checker.CheckNamedValue(nv)
			if err == nil {
				continue
			}
			if !errors.Is(err, driver.ErrSkip) {
				return err
			}
		}
		v, err := driver.DefaultParameterConverter.ConvertValue(nv.Value)
		if err != nil {
			return fmt.Errorf("pgreplica: converting argument $%d: %w", nv.Ordinal, err)
		}
		nv.Value = v
	}
	return nil
}

// QueryLSN runs a query that answers one pg_lsn as text (a replay, flush
// or insert position) and parses it (NULL or "" is 0).
func QueryLSN(ctx context.Context, c driver.Conn, query string) (uint64, error) {
	rows, err := Query(pgxtrace.Own(ctx), c, query, nil) // pgreplica's, not traced
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	v := make([]driver.Value, 1)
	if err := rows.Next(v); err != nil {
		return 0, err
	}
	return probe.LSN(v[0])
}

// QueryText runs a query of one value on c and returns it as text.
func QueryText(ctx context.Context, c driver.Conn, query string, args ...driver.NamedValue) (string, error) {
	rows, err := Query(pgxtrace.Own(ctx), c, query, args) // pgreplica's, not traced
	if err != nil {
		return "", err
	}
	defer rows.Close()
	vals := make([]driver.Value, 1)
	if err := rows.Next(vals); err != nil {
		return "", fmt.Errorf("pgreplica: %s: %w", query, err)
	}
	if v, ok := vals[0].(int64); ok {
		return fmt.Sprint(v), nil
	}
	return probe.Text(vals[0]), nil
}
