package inner

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"testing"
	"time"
)

// plainConn implements only driver.Conn: every statement goes through
// Prepare.
type plainConn struct {
	prepared []*fakeStmt
	answer   driver.Value
}

func (c *plainConn) Prepare(query string) (driver.Stmt, error) {
	st := &fakeStmt{query: query, answer: c.answer}
	c.prepared = append(c.prepared, st)
	return st, nil
}
func (c *plainConn) Close() error              { return nil }
func (c *plainConn) Begin() (driver.Tx, error) { return nil, errors.New("no transactions") }

type fakeStmt struct {
	query  string
	answer driver.Value
	args   []driver.NamedValue
	closed bool
}

func (s *fakeStmt) Close() error                               { s.closed = true; return nil }
func (s *fakeStmt) NumInput() int                              { return -1 }
func (s *fakeStmt) Exec([]driver.Value) (driver.Result, error) { return nil, errors.New("old Exec") }
func (s *fakeStmt) Query([]driver.Value) (driver.Rows, error)  { return nil, errors.New("old Query") }
func (s *fakeStmt) ExecContext(_ context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.args = args
	return driver.RowsAffected(1), nil
}
func (s *fakeStmt) QueryContext(_ context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.args = args
	return &oneRow{value: s.answer}, nil
}

// skippingConn offers the fast interfaces but declines them (ErrSkip),
// as a driver may for some statements.
type skippingConn struct{ plainConn }

func (*skippingConn) ExecContext(context.Context, string, []driver.NamedValue) (driver.Result, error) {
	return nil, driver.ErrSkip
}
func (*skippingConn) QueryContext(context.Context, string, []driver.NamedValue) (driver.Rows, error) {
	return nil, driver.ErrSkip
}

// TestFallbackToPrepare: a connection without the fast interfaces, or
// one that declines them, runs its statements through a prepared
// statement, closed once the statement ran or its rows closed.
func TestFallbackToPrepare(t *testing.T) {
	for name, c := range map[string]interface {
		driver.Conn
		stmts() []*fakeStmt
	}{"plain": &plainConn{}, "skipping": &skippingConn{}} {
		args := []driver.NamedValue{{Ordinal: 1, Value: int64(7)}}
		if _, err := Exec(context.Background(), c, "UPDATE t", args); err != nil {
			t.Fatalf("%s: Exec: %v", name, err)
		}
		rows, err := Query(context.Background(), c, "SELECT 1", args)
		if err != nil {
			t.Fatalf("%s: Query: %v", name, err)
		}
		sts := c.stmts()
		if len(sts) != 2 || sts[0].query != "UPDATE t" || sts[1].query != "SELECT 1" {
			t.Fatalf("%s: prepared %v, want the exec's then the query's", name, sts)
		}
		if !sts[0].closed || sts[0].args[0].Value != int64(7) {
			t.Errorf("%s: the exec's statement: closed %v, args %v", name, sts[0].closed, sts[0].args)
		}
		if sts[1].closed {
			t.Errorf("%s: the query's statement closed before its rows", name)
		}
		rows.Close()
		if !sts[1].closed {
			t.Errorf("%s: the query's statement still open after its rows closed", name)
		}
	}
}

func (c *plainConn) stmts() []*fakeStmt { return c.prepared }

// checkingConn converts what it knows and leaves the rest to database/sql's
// default (ErrSkip), refusing one value outright.
type checkingConn struct{ plainConn }

var errRefused = errors.New("refused")

func (*checkingConn) CheckNamedValue(nv *driver.NamedValue) error {
	switch v := nv.Value.(type) {
	case time.Duration:
		nv.Value = v.String()
		return nil
	case chan int:
		return errRefused
	}
	return driver.ErrSkip
}

type myInt int

// TestConvertArgs: the connection's checker first, then database/sql's
// default conversion, as database/sql would have done.
func TestConvertArgs(t *testing.T) {
	args := []driver.NamedValue{{Ordinal: 1, Value: time.Second}, {Ordinal: 2, Value: myInt(3)}}
	if err := ConvertArgs(&checkingConn{}, args); err != nil {
		t.Fatal(err)
	}
	if args[0].Value != "1s" || args[1].Value != int64(3) {
		t.Errorf("converted to %v, %v; want the checker's 1s and the default's int64 3", args[0].Value, args[1].Value)
	}
	if err := ConvertArgs(&checkingConn{}, []driver.NamedValue{{Ordinal: 1, Value: make(chan int)}}); !errors.Is(err, errRefused) {
		t.Errorf("a value the checker refuses: %v, want its error", err)
	}
	if err := ConvertArgs(&plainConn{}, []driver.NamedValue{{Ordinal: 2, Value: struct{}{}}}); err == nil {
		t.Error("a value nothing converts: no error")
	}
	if err := ConvertArgs(&plainConn{}, nil); err != nil {
		t.Errorf("no arguments: %v", err)
	}
}

// TestReadOne: QueryLSN reads a pg_lsn's text as a position (NULL is 0),
// QueryText one value as text.
func TestReadOne(t *testing.T) {
	for _, tc := range []struct {
		answer driver.Value
		want   uint64
	}{{"16/B374D848", 0x16_B374D848}, {[]byte("0/10"), 0x10}, {nil, 0}} {
		got, err := QueryLSN(context.Background(), &plainConn{answer: tc.answer}, "SELECT lsn")
		if err != nil || got != tc.want {
			t.Errorf("QueryLSN of %v = %x, %v; want %x", tc.answer, got, err, tc.want)
		}
	}
	if _, err := QueryLSN(context.Background(), &plainConn{answer: "not a position"}, "SELECT lsn"); err == nil {
		t.Error("QueryLSN of a bad position: no error")
	}
	for _, tc := range []struct {
		answer driver.Value
		want   string
	}{{"on", "on"}, {[]byte("off"), "off"}, {int64(42), "42"}} {
		got, err := QueryText(context.Background(), &plainConn{answer: tc.answer}, "SHOW x")
		if err != nil || got != tc.want {
			t.Errorf("QueryText of %v = %q, %v; want %q", tc.answer, got, err, tc.want)
		}
	}
	empty := &emptyConn{}
	if _, err := QueryText(context.Background(), empty, "SHOW x"); !errors.Is(err, io.EOF) {
		t.Errorf("QueryText of no row: %v, want io.EOF wrapped", err)
	}
}

// emptyConn answers no row.
type emptyConn struct{ plainConn }

func (*emptyConn) QueryContext(context.Context, string, []driver.NamedValue) (driver.Rows, error) {
	return &oneRow{done: true}, nil
}

// oneRow answers one row of one value, or none once done.
type oneRow struct {
	value driver.Value
	done  bool
}

func (r *oneRow) Columns() []string { return []string{"a"} }
func (r *oneRow) Close() error      { return nil }
func (r *oneRow) Next(dest []driver.Value) error {
	if r.done {
		return io.EOF
	}
	r.done = true
	dest[0] = r.value
	return nil
}
