package inner

import (
	"database/sql/driver"
	"io"
	"reflect"

	"github.com/pgreplica/pgreplica/internal/sqlstate"
)

// Rows are an inner driver's rows for database/sql, with an owner that
// learns how they ended. They forward the rows' optional column-type and
// result-set interfaces, so that ColumnTypes() and NextResultSet work as
// with the inner driver directly, and tell the owner once, when
// database/sql closes them, how they ended: the root package's rows embed
// Rows and do what the statement's plan asks once they are done (give the
// connection back, capture a write's position, bound a session's read).
type Rows struct {
	driver.Rows
	// After is told, once, when the rows close.
	After After
	// Read says the rows are a read-only transaction's: once a row or the
	// end came, a lost connection while closing them is not reported
	// (what came stands; what did not, the caller chose not to read; and
	// the transaction's COMMIT changes nothing).
	Read   bool
	err    error // first error Next returned, other than io.EOF
	begun  bool  // a row or the end came
	closed bool
}

// After is what runs when rows close: err is the first error of the rows,
// or of closing them. What it returns is what Close returns when closing
// itself did not fail (a write that must wait for replicas and did not
// get them).
type After interface{ AfterRows(err error) error }

var (
	_ driver.RowsNextResultSet              = (*Rows)(nil)
	_ driver.RowsColumnTypeDatabaseTypeName = (*Rows)(nil)
	_ driver.RowsColumnTypeLength           = (*Rows)(nil)
	_ driver.RowsColumnTypeNullable         = (*Rows)(nil)
	_ driver.RowsColumnTypePrecisionScale   = (*Rows)(nil)
	_ driver.RowsColumnTypeScanType         = (*Rows)(nil)
)

func (r *Rows) Next(dest []driver.Value) error {
	err := r.Rows.Next(dest)
	switch {
	case err == nil || err == io.EOF:
		r.begun = true
	case r.err == nil:
		r.err = err
	}
	return err
}

func (r *Rows) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	err := r.Rows.Close()
	if r.Read && r.begun && r.err == nil && sqlstate.ConnLost(err) {
		err = nil
	}
	if r.After != nil {
		e := r.err
		if e == nil {
			e = err
		}
		if after := r.After.AfterRows(e); err == nil {
			err = after
		}
	}
	return err
}

func (r *Rows) HasNextResultSet() bool {
	if x, ok := r.Rows.(driver.RowsNextResultSet); ok {
		return x.HasNextResultSet()
	}
	return false
}

func (r *Rows) NextResultSet() error {
	if x, ok := r.Rows.(driver.RowsNextResultSet); ok {
		return x.NextResultSet()
	}
	return io.EOF
}

func (r *Rows) ColumnTypeDatabaseTypeName(i int) string {
	if x, ok := r.Rows.(driver.RowsColumnTypeDatabaseTypeName); ok {
		return x.ColumnTypeDatabaseTypeName(i)
	}
	return ""
}

func (r *Rows) ColumnTypeLength(i int) (int64, bool) {
	if x, ok := r.Rows.(driver.RowsColumnTypeLength); ok {
		return x.ColumnTypeLength(i)
	}
	return 0, false
}

func (r *Rows) ColumnTypeNullable(i int) (bool, bool) {
	if x, ok := r.Rows.(driver.RowsColumnTypeNullable); ok {
		return x.ColumnTypeNullable(i)
	}
	return false, false
}

func (r *Rows) ColumnTypePrecisionScale(i int) (int64, int64, bool) {
	if x, ok := r.Rows.(driver.RowsColumnTypePrecisionScale); ok {
		return x.ColumnTypePrecisionScale(i)
	}
	return 0, 0, false
}

func (r *Rows) ColumnTypeScanType(i int) reflect.Type {
	if x, ok := r.Rows.(driver.RowsColumnTypeScanType); ok {
		return x.ColumnTypeScanType(i)
	}
	return reflect.TypeFor[any]()
}
