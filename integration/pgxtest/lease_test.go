package pgxtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgreplica/pgreplica/internal/pgxroute"
)

// TestStaleDoneLeavesTheNextBorrow: a connection keeps one lease record
// and reuses it for its next borrow; a Done through the handle of an
// ended borrow must do nothing, even once the connection is lent again.
// One primary connection, so every borrow is of the same one.
func TestStaleDoneLeavesTheNextBorrow(t *testing.T) {
	pool, _ := open(t, "pgreplica_max_conns_per_host=1")
	ctx := ctxFor(t)
	r, ok := pgxroute.For(pool.Connector())
	if !ok {
		t.Fatal("no pgx router for the pool's connector")
	}
	borrow := func(ctx context.Context) (pgxroute.Lease, uint32, error) {
		var pid uint32
		l, err := r.Route(ctx, pgxroute.Request{Kind: pgxroute.Exec, SQL: "SELECT 1"},
			pgxroute.OpFunc(func(c *pgx.Conn) error { pid = c.PgConn().PID(); return nil }))
		return l, pid, err
	}

	first, pid1, err := borrow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first.Done(nil)
	first.Done(nil) // idempotent: the connection goes back once
	second, pid2, err := borrow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if pid2 != pid1 {
		t.Fatalf("second borrow on backend %d, first on %d: the pool has more than one connection", pid2, pid1)
	}

	first.Done(nil) // stale: the connection is the second borrow's
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if l, pid, err := borrow(short); err == nil {
		l.Done(nil)
		t.Fatalf("a borrow got backend %d while the second borrow holds the only connection: a stale Done gave it back", pid)
	} else if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("borrow while the only connection is held: %v, want the context's deadline", err)
	}
	if err := second.Conn().Ping(ctx); err != nil {
		t.Fatalf("the second borrow's connection after a stale Done: %v", err)
	}

	second.Done(nil)
	third, pid3, err := borrow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Done(nil)
	if pid3 != pid1 {
		t.Fatalf("third borrow on backend %d, want the one connection %d", pid3, pid1)
	}
}
