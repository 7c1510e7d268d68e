package pgxtest

import (
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
