package inner

import (
	"database/sql/driver"
	"errors"
	"io"
	"reflect"
	"testing"
)

// plainRows implement only driver.Rows.
type plainRows struct {
	left     int
	fail     error
	closeErr error
}

func (r *plainRows) Columns() []string { return []string{"a"} }
func (r *plainRows) Close() error      { return r.closeErr }
func (r *plainRows) Next(dest []driver.Value) error {
	if r.left == 0 {
		if r.fail != nil {
			return r.fail
		}
		return io.EOF
	}
	r.left--
	dest[0] = int64(r.left)
	return nil
}

// typedRows also say their column types and result sets.
type typedRows struct{ plainRows }

func (typedRows) HasNextResultSet() bool                            { return true }
func (typedRows) NextResultSet() error                              { return nil }
func (typedRows) ColumnTypeDatabaseTypeName(int) string             { return "INT8" }
func (typedRows) ColumnTypeLength(int) (int64, bool)                { return 8, true }
func (typedRows) ColumnTypeNullable(int) (bool, bool)               { return true, true }
func (typedRows) ColumnTypePrecisionScale(int) (int64, int64, bool) { return 10, 2, true }
func (typedRows) ColumnTypeScanType(int) reflect.Type               { return reflect.TypeFor[int64]() }

type after struct {
	calls int
	err   error
}

func (a *after) AfterRows(err error) error { a.calls++; a.err = err; return nil }

func drain(t *testing.T, r *Rows) {
	t.Helper()
	v := make([]driver.Value, 1)
	for r.Next(v) == nil {
	}
}

// The owner hears once, at the first Close, of the first error of the
// rows, or else of closing them.
func TestAfterOnce(t *testing.T) {
	boom, closing := errors.New("boom"), errors.New("closing")
	for _, tc := range []struct {
		inner *plainRows
		want  error
	}{
		{&plainRows{left: 2}, nil},
		{&plainRows{left: 1, fail: boom, closeErr: closing}, boom},
		{&plainRows{left: 1, closeErr: closing}, closing},
	} {
		a := &after{}
		r := &Rows{Rows: tc.inner, After: a}
		drain(t, r)
		if err := r.Close(); err != tc.inner.closeErr {
			t.Errorf("Close = %v, want the inner rows' %v", err, tc.inner.closeErr)
		}
		r.Close()
		if a.calls != 1 || a.err != tc.want {
			t.Errorf("after: %d calls, err %v; want 1 call, err %v", a.calls, a.err, tc.want)
		}
	}
}

// What the inner rows say of their columns comes through; rows that say
// nothing read as database/sql's defaults.
func TestForwards(t *testing.T) {
	typed := &Rows{Rows: &typedRows{}}
	if !typed.HasNextResultSet() || typed.NextResultSet() != nil || typed.ColumnTypeDatabaseTypeName(0) != "INT8" {
		t.Error("result sets or type name not forwarded")
	}
	if n, ok := typed.ColumnTypeLength(0); n != 8 || !ok {
		t.Error("length not forwarded")
	}
	if n, ok := typed.ColumnTypeNullable(0); !n || !ok {
		t.Error("nullable not forwarded")
	}
	if p, s, ok := typed.ColumnTypePrecisionScale(0); p != 10 || s != 2 || !ok {
		t.Error("precision not forwarded")
	}
	if typed.ColumnTypeScanType(0) != reflect.TypeFor[int64]() {
		t.Error("scan type not forwarded")
	}
	plain := &Rows{Rows: &plainRows{}}
	if plain.HasNextResultSet() || plain.NextResultSet() != io.EOF || plain.ColumnTypeDatabaseTypeName(0) != "" {
		t.Error("defaults wrong")
	}
	if _, ok := plain.ColumnTypeLength(0); ok {
		t.Error("length from nowhere")
	}
	if _, ok := plain.ColumnTypeNullable(0); ok {
		t.Error("nullable from nowhere")
	}
	if _, _, ok := plain.ColumnTypePrecisionScale(0); ok {
		t.Error("precision from nowhere")
	}
	if plain.ColumnTypeScanType(0) != reflect.TypeFor[any]() {
		t.Error("scan type from nowhere")
	}
}

// TestReadRowsStandAfterALostConnection: a read-only transaction's rows
// (Read) closed after a row came do not report a connection lost while
// their end was read; before any row, or for other rows, it is reported.
func TestReadRowsStandAfterALostConnection(t *testing.T) {
	dest := make([]driver.Value, 1)
	for _, c := range []struct {
		read, next bool
		err        error
		want       bool // Close reports err
	}{
		{read: true, next: true, err: io.ErrUnexpectedEOF, want: false},
		{read: true, next: false, err: io.ErrUnexpectedEOF, want: true},
		{read: false, next: true, err: io.ErrUnexpectedEOF, want: true},
		{read: true, next: true, err: errors.New("a server error"), want: true},
	} {
		r := &Rows{Rows: &plainRows{left: 1, closeErr: c.err}, Read: c.read}
		if c.next {
			if err := r.Next(dest); err != nil {
				t.Fatal(err)
			}
		}
		if got := r.Close(); (got != nil) != c.want {
			t.Errorf("read %v, a row came %v, close error %v: Close = %v, want reported %v", c.read, c.next, c.err, got, c.want)
		}
	}
}
