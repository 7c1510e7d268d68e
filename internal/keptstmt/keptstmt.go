// Package keptstmt keeps the inner statements a physical connection keeps
// prepared from one transaction to the next, as pgx's stdlib keeps the
// statements prepared on one of its connections: database/sql prepares a
// statement again on the transaction's conn at every Tx.Stmt (go-tpc,
// sqlx and many services prepare once and use the statement in every
// transaction), and closes it when the transaction ends. Without them,
// each use would cost a Parse and a Deallocate, two round trips, where
// the inner driver alone pays none (the statement prepared on its conn
// holds it there). It needs no router: the root package prepares on its
// connection and hands the statement over. Its tests run with
// `go test ./internal/keptstmt/`.
package keptstmt

import (
	"database/sql/driver"
	"strings"
)

// Max bounds the statements a connection keeps; the least recently used
// one not in use is closed beyond it. pgx's own cache of statements per
// connection holds 512.
const Max = 128

// Set are the statements one connection keeps. Only the borrower of the
// connection touches them: no lock.
type Set struct {
	m    map[string]*kept
	tick uint64 // counts uses, for the least recently used
}

type kept struct {
	st    driver.Stmt
	users int    // stmts of virtual conns using it now
	used  uint64 // tick of its last use
}

// Take returns the statement kept for query, with one more user, or nil.
func (s *Set) Take(query string) driver.Stmt {
	s.tick++
	k := s.m[query]
	if k == nil {
		return nil
	}
	k.users++
	k.used = s.tick
	return k.st
}

// Keep keeps st, just prepared for query and used once, from now on. A
// COPY is not kept: lib/pq's CopyIn makes a statement for one use.
func (s *Set) Keep(query string, st driver.Stmt) {
	if IsCopy(query) {
		return
	}
	if s.m == nil {
		s.m = make(map[string]*kept)
	}
	s.m[query] = &kept{st: st, users: 1, used: s.tick}
	if len(s.m) > Max {
		s.evict()
	}
}

// Release gives back a statement Take or Keep had. When the connection
// goes back to its pool (keep), the set keeps it for the next
// transaction; a statement its user closed while the connection is
// still the conn's is closed on the server once nobody uses it, as the
// inner driver closes it. A statement the set does not keep is closed.
func (s *Set) Release(query string, st driver.Stmt, keep bool) error {
	k := s.m[query]
	if k == nil || k.st != st {
		return st.Close()
	}
	if k.users--; k.users > 0 || keep {
		return nil
	}
	delete(s.m, query)
	return st.Close()
}

// IsCopy reports a COPY statement, by its first keyword.
func IsCopy(query string) bool {
	q := strings.TrimLeft(query, " \t\r\n")
	return len(q) >= 4 && strings.EqualFold(q[:4], "copy")
}

// evict closes the least recently used statement that nobody uses.
func (s *Set) evict() {
	var oldest string
	var k *kept
	for q, c := range s.m {
		if c.users == 0 && (k == nil || c.used < k.used) {
			oldest, k = q, c
		}
	}
	if k != nil {
		delete(s.m, oldest)
		k.st.Close()
	}
}
