package pgreplica

import (
	"database/sql/driver"
	"io"
	"reflect"
)

// routedRows wraps the inner rows of a statement so that what the plan
// asks once they are done (release the connection, capture a write's LSN,
// bound a session read) happens when database/sql closes them, and
// forwards the optional column-type interfaces of the inner rows so
// ColumnTypes() works as with the inner driver directly.
type routedRows struct {
	driver.Rows
	after  rowsAfter
	err    error // first error Next returned, other than io.EOF
	closed bool
}

// rowsAfter is what runs when rows close: err is the first error of the
// rows, or of closing them.
type rowsAfter interface{ afterRows(err error) }

// leasedRows are the rows of a routed query (one allocation per query).
type leasedRows struct {
	routedRows
	pl plan
	l  lease
}

func (r *leasedRows) afterRows(err error) {
	if err == nil {
		r.l.c.finish(&r.pl, &r.l)
	}
	r.l.release(err)
}

// capturingRows are the rows of a write on a pinned connection: its LSN
// is captured once they are done; the connection stays pinned.
type capturingRows struct {
	routedRows
	c  *Connector
	pl plan
	p  *physical
}

func (r *capturingRows) afterRows(err error) {
	if err == nil {
		r.c.wrote(&r.pl, r.p, false)
	}
}

var (
	_ driver.RowsNextResultSet              = (*routedRows)(nil)
	_ driver.RowsColumnTypeDatabaseTypeName = (*routedRows)(nil)
	_ driver.RowsColumnTypeLength           = (*routedRows)(nil)
	_ driver.RowsColumnTypeNullable         = (*routedRows)(nil)
	_ driver.RowsColumnTypePrecisionScale   = (*routedRows)(nil)
	_ driver.RowsColumnTypeScanType         = (*routedRows)(nil)
)

func (r *routedRows) Next(dest []driver.Value) error {
	err := r.Rows.Next(dest)
	if err != nil && err != io.EOF && r.err == nil {
		r.err = err
	}
	return err
}

func (r *routedRows) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	err := r.Rows.Close()
	if r.after != nil {
		e := r.err
		if e == nil {
			e = err
		}
		r.after.afterRows(e)
	}
	return err
}

func (r *routedRows) HasNextResultSet() bool {
	if x, ok := r.Rows.(driver.RowsNextResultSet); ok {
		return x.HasNextResultSet()
	}
	return false
}

func (r *routedRows) NextResultSet() error {
	if x, ok := r.Rows.(driver.RowsNextResultSet); ok {
		return x.NextResultSet()
	}
	return io.EOF
}

func (r *routedRows) ColumnTypeDatabaseTypeName(i int) string {
	if x, ok := r.Rows.(driver.RowsColumnTypeDatabaseTypeName); ok {
		return x.ColumnTypeDatabaseTypeName(i)
	}
	return ""
}

func (r *routedRows) ColumnTypeLength(i int) (int64, bool) {
	if x, ok := r.Rows.(driver.RowsColumnTypeLength); ok {
		return x.ColumnTypeLength(i)
	}
	return 0, false
}

func (r *routedRows) ColumnTypeNullable(i int) (bool, bool) {
	if x, ok := r.Rows.(driver.RowsColumnTypeNullable); ok {
		return x.ColumnTypeNullable(i)
	}
	return false, false
}

func (r *routedRows) ColumnTypePrecisionScale(i int) (int64, int64, bool) {
	if x, ok := r.Rows.(driver.RowsColumnTypePrecisionScale); ok {
		return x.ColumnTypePrecisionScale(i)
	}
	return 0, 0, false
}

func (r *routedRows) ColumnTypeScanType(i int) reflect.Type {
	if x, ok := r.Rows.(driver.RowsColumnTypeScanType); ok {
		return x.ColumnTypeScanType(i)
	}
	return reflect.TypeFor[any]()
}
