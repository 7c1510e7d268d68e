package pgxtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestReadOnlyTxStandsWhenItsCommitIsLost: a pooler or server restart
// ends a transaction's connection between its last statement and its
// COMMIT (here, its backend is terminated). A READ ONLY transaction
// changed nothing: Commit reports no error and what it read stands. A
// read-write one reports the loss (its outcome is unknown).
func TestReadOnlyTxStandsWhenItsCommitIsLost(t *testing.T) {
	pool, _ := open(t)
	ctx := ctxFor(t)
	for _, c := range []struct {
		opts    pgx.TxOptions
		wantErr bool
	}{
		{pgx.TxOptions{AccessMode: pgx.ReadOnly}, false},
		{pgx.TxOptions{}, true},
	} {
		tx, err := pool.BeginTx(ctx, c.opts)
		if err != nil {
			t.Fatal(err)
		}
		var pid, port int32
		if err := tx.QueryRow(ctx, "SELECT pg_backend_pid(), inet_server_port()").Scan(&pid, &port); err != nil {
			t.Fatal(err)
		}
		// pg_terminate_backend with a timeout returns once the backend
		// has exited.
		if err := cluster.Exec(ctx, nodeOf(t, port), "SELECT pg_terminate_backend($1, 10000)", pid); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); (err != nil) != c.wantErr {
			t.Errorf("%s transaction, its backend ended before COMMIT: Commit = %v, want an error %v", c.opts.AccessMode, err, c.wantErr)
		}
	}
}

// TestReadOnlyTxBegunAgainWhenItsFirstStatementLosesItsConnection: a
// pooler or server restart ends a transaction's connection after BEGIN,
// before its first statement (here, its backend is terminated). A READ
// ONLY transaction of which nothing was seen begins again, where a new
// one would, and the statement answers. Once a statement answered, and
// in a read-write transaction, the loss is reported.
func TestReadOnlyTxBegunAgainWhenItsFirstStatementLosesItsConnection(t *testing.T) {
	pool, _ := open(t)
	ctx := ctxFor(t)
	statements := []struct {
		name string
		run  func(pgx.Tx) error
	}{
		{"QueryRow", func(tx pgx.Tx) error {
			var n int32
			return tx.QueryRow(ctx, "SELECT 1").Scan(&n)
		}},
		{"Query", func(tx pgx.Tx) error {
			rows, _ := tx.Query(ctx, "SELECT generate_series(1, 3)")
			got, err := pgx.CollectRows(rows, pgx.RowTo[int32])
			if err == nil && len(got) != 3 {
				t.Errorf("Query after the transaction began again: %d rows, want 3", len(got))
			}
			return err
		}},
		{"Exec", func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "SELECT 1")
			return err
		}},
	}
	readOnly := pgx.TxOptions{AccessMode: pgx.ReadOnly}
	for _, c := range []struct {
		name     string
		opts     pgx.TxOptions
		answered bool // a statement answered before the loss
		wantErr  bool
	}{
		{"read-only", readOnly, false, false},
		{"read-only after a statement answered", readOnly, true, true},
		{"read-write", pgx.TxOptions{}, false, true},
	} {
		for _, s := range statements {
			tx, err := pool.BeginTx(ctx, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			if c.answered {
				if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
					t.Fatal(err)
				}
			}
			terminateIdleInTransaction(t, ctx)
			err = s.run(tx)
			if (err != nil) != c.wantErr {
				t.Errorf("%s transaction, %s its first statement after its backend ended: %v, want an error %v", c.name, s.name, err, c.wantErr)
			}
			if err == nil {
				if err := tx.Commit(ctx); err != nil {
					t.Errorf("%s transaction begun again, %s: Commit = %v", c.name, s.name, err)
				}
			}
			_ = tx.Rollback(ctx)
		}
	}
}

// terminateIdleInTransaction ends the one backend of the test's handle
// that is in a transaction, on whichever node it is, and waits for it
// to exit (pg_terminate_backend with a timeout). PostgreSQL keeps 63
// bytes of an application_name.
func terminateIdleInTransaction(t *testing.T, ctx context.Context) {
	t.Helper()
	ended := 0
	for i := range cluster.Len() {
		n, err := cluster.QueryString(ctx, i, `SELECT count(pg_terminate_backend(pid, 10000)) FROM pg_stat_activity
			WHERE application_name = left($1, 63) AND state = 'idle in transaction'`, appName(t))
		if err != nil {
			t.Fatal(err)
		}
		if n != "0" {
			ended++
		}
	}
	if ended != 1 {
		t.Fatalf("ended the backends in a transaction on %d nodes, want the one", ended)
	}
}
