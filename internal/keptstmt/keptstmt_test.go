package keptstmt

import (
	"database/sql/driver"
	"fmt"
	"testing"
)

type fakeStmt struct{ closed int }

func (s *fakeStmt) Close() error                               { s.closed++; return nil }
func (s *fakeStmt) NumInput() int                              { return -1 }
func (s *fakeStmt) Exec([]driver.Value) (driver.Result, error) { return nil, nil }
func (s *fakeStmt) Query([]driver.Value) (driver.Rows, error)  { return nil, nil }

// A statement kept in one transaction serves the next, and is closed once
// its user closed it and nobody else uses it.
func TestKeptAcrossTransactions(t *testing.T) {
	var s Set
	st := &fakeStmt{}
	if s.Take("SELECT 1") != nil {
		t.Fatal("an empty set had a statement")
	}
	s.Keep("SELECT 1", st)
	if err := s.Release("SELECT 1", st, true); err != nil || st.closed != 0 {
		t.Fatalf("the end of a transaction closed the statement (%v)", err)
	}
	if s.Take("SELECT 1") != st || s.Take("SELECT 1") != st {
		t.Fatal("the next transactions did not get the kept statement")
	}
	s.Release("SELECT 1", st, false)
	if st.closed != 0 {
		t.Fatal("closed while another user has it")
	}
	s.Release("SELECT 1", st, false)
	if st.closed != 1 || s.Take("SELECT 1") != nil {
		t.Fatal("not closed and forgotten once nobody uses it")
	}
	other := &fakeStmt{}
	s.Release("SELECT 2", other, true)
	if other.closed != 1 {
		t.Error("a statement the set does not keep was not closed")
	}
}

// A COPY is never kept; past Max the least recently used idle statement
// is closed.
func TestKeepBounds(t *testing.T) {
	var s Set
	s.Keep(" \ncopy t from stdin", &fakeStmt{})
	if s.Take("copy t from stdin") != nil || len(s.m) != 0 {
		t.Error("a COPY was kept")
	}
	stmts := make([]*fakeStmt, Max+1)
	for i := range stmts {
		q := fmt.Sprint("SELECT ", i)
		s.Take(q)
		stmts[i] = &fakeStmt{}
		s.Keep(q, stmts[i])
		if i != 1 {
			s.Release(q, stmts[i], true) // idle; SELECT 1 stays in use
		}
	}
	if len(s.m) != Max || stmts[0].closed != 1 || stmts[1].closed != 0 {
		t.Errorf("%d kept; the oldest closed %d times, the one in use %d", len(s.m), stmts[0].closed, stmts[1].closed)
	}
}

func TestIsCopy(t *testing.T) {
	for q, want := range map[string]bool{"COPY t FROM STDIN": true, "\t copy": true, "cop": false, "SELECT 'copy'": false, "": false} {
		if IsCopy(q) != want {
			t.Errorf("IsCopy(%q) = %v", q, !want)
		}
	}
}
