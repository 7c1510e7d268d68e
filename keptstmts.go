package pgreplica

import (
	"context"
	"database/sql/driver"
	"strings"
)

// keptStmts are the inner statements a physical connection keeps prepared
// from one transaction to the next, as pgx's stdlib keeps the statements
// prepared on one of its connections: database/sql prepares a statement
// again on the transaction's conn at every Tx.Stmt (go-tpc, sqlx and many
// services prepare once and use the statement in every transaction), and
// closes it when the transaction ends. Without this, each use would cost
// a Parse and a Deallocate, two round trips, where the inner driver alone
// pays none (the statement prepared on its conn holds it there). A
// statement its user closes while the connection is still the conn's is
// closed as the inner driver closes it. Only the borrower of the connection touches them: no lock.
type keptStmts struct {
	m    map[string]*keptStmt
	tick uint64 // counts uses, for the least recently used
}

type keptStmt struct {
	st    driver.Stmt
	users int    // stmts of virtual conns using it now
	used  uint64 // tick of its last use
}

// maxKeptStmts bounds the statements a connection keeps; the least
// recently used one not in use is closed beyond it. pgx's own cache of
// statements per connection holds 512.
const maxKeptStmts = 128

// prepareStmt returns an inner statement for query on p: the one p keeps, or
// a new one, kept from now on. A COPY is not kept: lib/pq's CopyIn makes
// a statement for one use.
func (p *physical) prepareStmt(ctx context.Context, query string) (driver.Stmt, error) {
	ks := &p.stmts
	ks.tick++
	if k := ks.m[query]; k != nil {
		k.users++
		k.used = ks.tick
		return k.st, nil
	}
	st, err := prepareInner(ctx, p.conn, query)
	if err != nil || isCopy(query) {
		return st, err
	}
	if ks.m == nil {
		ks.m = make(map[string]*keptStmt)
	}
	ks.m[query] = &keptStmt{st: st, users: 1, used: ks.tick}
	if len(ks.m) > maxKeptStmts {
		ks.evict()
	}
	return st, nil
}

// releaseStmt gives back a statement prepareStmt returned. When the
// connection goes back to its pool (keep), p keeps it for the next
// transaction; a statement its user closed is closed on the server once
// nobody uses it, as the inner driver closes it.
func (p *physical) releaseStmt(query string, st driver.Stmt, keep bool) error {
	k := p.stmts.m[query]
	if k == nil || k.st != st {
		return st.Close()
	}
	if k.users--; k.users > 0 || keep {
		return nil
	}
	delete(p.stmts.m, query)
	return st.Close()
}

// isCopy reports a COPY statement, by its first keyword.
func isCopy(query string) bool {
	q := strings.TrimLeft(query, " \t\r\n")
	return len(q) >= 4 && strings.EqualFold(q[:4], "copy")
}

// evict closes the least recently used statement that nobody uses.
func (ks *keptStmts) evict() {
	var oldest string
	var k *keptStmt
	for q, c := range ks.m {
		if c.users == 0 && (k == nil || c.used < k.used) {
			oldest, k = q, c
		}
	}
	if k != nil {
		delete(ks.m, oldest)
		k.st.Close()
	}
}
