package drivertest

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/pgreplica/pgreplica"
)

// TestReadYourWritesWithPausedReplicas: a write through context.Background
// is seen by the very next read while replay is paused everywhere (the
// primary serves it after the wait budget), and by a replica once replay
// resumes. Run for both inner drivers and both commit modes.
func TestReadYourWritesWithPausedReplicas(t *testing.T) {
	for _, inner := range drivers {
		for _, async := range []bool{false, true} {
			name := inner + "/sync"
			if async {
				name = inner + "/async"
			}
			t.Run(name, func(t *testing.T) {
				db := open(t, inner)
				ctx := ctxFor(t)
				tbl := table(t, db)
				cn, err := db.Conn(ctx) // one conn so SET sticks (it pins)
				if err != nil {
					t.Fatal(err)
				}
				defer cn.Close()
				if async {
					if _, err := cn.ExecContext(ctx, "SET synchronous_commit = off"); err != nil {
						t.Fatal(err)
					}
				}
				if err := cluster.WaitCaughtUp(ctx); err != nil {
					t.Fatal(err)
				}
				resume := cluster.PauseReplicas(t)
				if _, err := cn.ExecContext(ctx, "INSERT INTO "+tbl+" (v) VALUES ($1)", "fresh"); err != nil {
					t.Fatal(err)
				}
				var v string
				var port int
				q := "SELECT v, inet_server_port() FROM " + tbl + " WHERE v = 'fresh'"
				if err := db.QueryRowContext(context.Background(), q).Scan(&v, &port); err != nil {
					t.Fatalf("read after write with replay paused: %v", err)
				}
				if n := nodeOf(t, port); n != cluster.Primary() {
					t.Fatalf("served by node %d with replay paused; only the primary has the row", n)
				}
				// Replica only: a clear error, not stale data.
				err = db.QueryRowContext(pgreplica.WithFallback(ctx, pgreplica.FallbackError), q).Scan(&v, &port)
				if !errors.Is(err, pgreplica.ErrNoFreshReplica) {
					t.Fatalf("replica-only read with replay paused: %v, want ErrNoFreshReplica", err)
				}
				resume()
				if err := db.QueryRowContext(context.Background(), q).Scan(&v, &port); err != nil {
					t.Fatal(err)
				}
				if n := nodeOf(t, port); n == cluster.Primary() {
					t.Fatalf("after resume the read still went to the primary")
				}
			})
		}
	}
}

// TestTokenAcrossDBs: a session token carried as a string from one *sql.DB
// to another gives the second read-your-writes. The consumer stands for
// another process: two *sql.DB of one process share the process
// watermark (TestProcessDefaultSpansDBs), so it opts out of it.
func TestTokenAcrossDBs(t *testing.T) {
	for _, inner := range drivers {
		t.Run(inner, func(t *testing.T) {
			producer := open(t, inner)
			consumer := open(t, inner, "pgreplica_default=eventual")
			ctx := ctxFor(t)
			tbl := table(t, producer)
			if err := cluster.WaitCaughtUp(ctx); err != nil {
				t.Fatal(err)
			}
			resume := cluster.PauseReplicas(t)

			sess := pgreplica.NewSession()
			var id int
			if err := producer.QueryRowContext(pgreplica.WithSession(ctx, sess),
				"INSERT INTO "+tbl+" (v) VALUES ('job') RETURNING id").Scan(&id); err != nil {
				t.Fatal(err)
			}
			token := sess.Token()
			if sess.LSN() == 0 || token == "" {
				t.Fatalf("the write did not advance the session: %q", token)
			}

			parsed, err := pgreplica.ParseToken(token)
			if err != nil {
				t.Fatal(err)
			}
			wctx := pgreplica.WithToken(ctx, parsed)
			var v string
			var port int
			q := "SELECT v, inet_server_port() FROM " + tbl + " WHERE id = $1"
			if err := consumer.QueryRowContext(wctx, q, id).Scan(&v, &port); err != nil {
				t.Fatalf("consumer read with the token, replay paused: %v", err)
			}
			if nodeOf(t, port) != cluster.Primary() {
				t.Fatal("served by a paused replica")
			}
			// Without the token the consumer (which wrote nothing) reads a
			// replica and does not see the row: the token is what carries
			// the guarantee.
			if err := consumer.QueryRowContext(ctx, q, id).Scan(&v, &port); !errors.Is(err, sql.ErrNoRows) {
				t.Fatalf("untokened read with replay paused: %v, want no rows from a replica", err)
			}
			resume()
			if err := consumer.QueryRowContext(wctx, q, id).Scan(&v, &port); err != nil {
				t.Fatal(err)
			}
			if nodeOf(t, port) == cluster.Primary() {
				t.Fatal("after resume the tokened read still went to the primary")
			}
		})
	}
}

// TestCommitCapture: a read-write transaction's commit raises the session
// watermark, read after the commit.
func TestCommitCapture(t *testing.T) {
	for _, inner := range drivers {
		t.Run(inner, func(t *testing.T) {
			db := open(t, inner)
			ctx := ctxFor(t)
			tbl := table(t, db)
			cluster.PauseReplicas(t)
			sess := pgreplica.NewSession()
			sctx := pgreplica.WithSession(ctx, sess)
			tx, err := db.BeginTx(sctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.ExecContext(sctx, "INSERT INTO "+tbl+" (v) VALUES ('tx')"); err != nil {
				t.Fatal(err)
			}
			if sess.LSN() != 0 {
				t.Fatal("the watermark rose before Commit")
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			if sess.LSN() == 0 {
				t.Fatal("Commit did not raise the watermark")
			}
			var n int
			if err := db.QueryRowContext(sctx, "SELECT count(*) FROM "+tbl).Scan(&n); err != nil || n != 1 {
				t.Fatalf("read after commit: %d, %v", n, err)
			}
			// A read-only transaction with the session also sees it.
			rtx, err := db.BeginTx(sctx, &sql.TxOptions{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			if err := rtx.QueryRowContext(sctx, "SELECT count(*) FROM "+tbl).Scan(&n); err != nil || n != 1 {
				t.Fatalf("read-only tx after commit: %d, %v", n, err)
			}
			rtx.Commit()
		})
	}
}
