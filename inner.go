package pgreplica

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
)

// Statements on an inner connection through database/sql/driver's
// interfaces, which every inner driver implements: exec, query and
// prepare by the fastest one it offers, the conversion of arguments
// database/sql would have done, and the positions the router reads.

// execInner runs a statement through the inner driver's fastest interface.
func execInner(ctx context.Context, c driver.Conn, query string, args []driver.NamedValue) (driver.Result, error) {
	if e, ok := c.(driver.ExecerContext); ok {
		r, err := e.ExecContext(ctx, query, args)
		if !errors.Is(err, driver.ErrSkip) {
			return r, err
		}
	}
	st, err := prepareInner(ctx, c, query)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	if se, ok := st.(driver.StmtExecContext); ok {
		return se.ExecContext(ctx, args)
	}
	return nil, fmt.Errorf("pgreplica: inner statement does not implement StmtExecContext")
}

// queryInner runs a query through the inner driver's fastest interface.
func queryInner(ctx context.Context, c driver.Conn, query string, args []driver.NamedValue) (driver.Rows, error) {
	if q, ok := c.(driver.QueryerContext); ok {
		r, err := q.QueryContext(ctx, query, args)
		if !errors.Is(err, driver.ErrSkip) {
			return r, err
		}
	}
	st, err := prepareInner(ctx, c, query)
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

func prepareInner(ctx context.Context, c driver.Conn, query string) (driver.Stmt, error) {
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

// convertArgs applies the physical conn's own NamedValueChecker, then
// database/sql's default conversion, exactly as database/sql would have done
// had it talked to that conn directly. pgreplica's virtual conn accepts
// every value (it does not know yet which physical conn will run the
// statement), so the conversion happens here.
func convertArgs(c driver.Conn, args []driver.NamedValue) error {
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

// queryLSN runs a query that answers one pg_lsn as text (a replay, flush
// or insert position) and parses it.
func queryLSN(ctx context.Context, c driver.Conn, query string) (LSN, error) {
	rows, err := queryInner(ctx, c, query, nil)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	v := make([]driver.Value, 1)
	if err := rows.Next(v); err != nil {
		return 0, err
	}
	return lsnValue(v[0])
}

// Positions the router reads. A write's LSN must be read after its COMMIT
// and be at or past the end of its record: for a synchronous commit the
// flush LSN is the tight choice (already flushed, so replicas will reach
// it); when the commit may have been asynchronous only the insert LSN is
// safe (the flush LSN is usually still below the commit record).
const (
	replaySQL    = "SELECT pg_last_wal_replay_lsn()::text"
	flushLSNSQL  = "SELECT pg_current_wal_flush_lsn()::text"
	insertLSNSQL = "SELECT pg_current_wal_insert_lsn()::text"
)

func lsnSQL(async bool) string {
	if async {
		return insertLSNSQL
	}
	return flushLSNSQL
}
