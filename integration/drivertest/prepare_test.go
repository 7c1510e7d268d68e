package drivertest

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/lib/pq"
	"github.com/pgreplica/pgreplica"
)

// openPlain opens the inner driver itself on the primary: what pgreplica
// must answer like, in everything that is not routing.
func openPlain(t *testing.T, inner string) *sql.DB {
	t.Helper()
	cluster.Need(t)
	name := map[string]string{"pgx": "pgx", "pq": "postgres"}[inner]
	db, err := sql.Open(name, cluster.NodeDSN(cluster.Primary())+"&application_name="+appName(t)+"_plain")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

type preparer interface {
	PrepareContext(context.Context, string) (*sql.Stmt, error)
}

// prepareOutcome prepares q and runs it once with each argument list,
// and describes what happened: errors are compared by their text, which
// quotes the server's message and SQLSTATE or database/sql's argument
// count check (made against the statement's NumInput).
func prepareOutcome(ctx context.Context, p preparer, q string, argLists ...[]any) string {
	st, err := p.PrepareContext(ctx, q)
	if err != nil {
		return "prepare: " + err.Error()
	}
	defer st.Close()
	out := "prepared"
	for _, args := range argLists {
		_, err := st.ExecContext(ctx, args...)
		out += fmt.Sprintf("; exec%v: %v", args, err)
	}
	return out
}

// TestPrepareLikeInner: db.Prepare, tx.Prepare and Prepare on a pinned
// conn answer exactly as the inner driver does on the primary: the
// server's error for a statement it rejects, and the statement's real
// parameter count.
func TestPrepareLikeInner(t *testing.T) {
	for _, inner := range drivers {
		t.Run(inner, func(t *testing.T) {
			db := open(t, inner)
			plain := openPlain(t, inner)
			ctx := ctxFor(t)
			tbl := table(t, db)
			cases := []struct {
				q    string
				args [][]any
			}{
				{"SELEC 1", nil},
				{"SELECT * FROM pgr_no_such_table", nil},
				{"SELECT $1::int + $2::int", [][]any{{1}, {1, 2}, {1, 2, 3}}},
				{"INSERT INTO " + tbl + " (v) VALUES ($1)", [][]any{{}, {"a"}}},
				{"SELECT 1", [][]any{{}, {1}}},
			}
			for _, tc := range cases {
				want := prepareOutcome(ctx, plain, tc.q, tc.args...)
				if got := prepareOutcome(ctx, db, tc.q, tc.args...); got != want {
					t.Errorf("db.Prepare(%q):\n got  %s\n want %s", tc.q, got, want)
				}
				ptx, err := plain.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				want = prepareOutcome(ctx, ptx, tc.q, tc.args...)
				ptx.Rollback()
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				got := prepareOutcome(ctx, tx, tc.q, tc.args...)
				tx.Rollback()
				if got != want {
					t.Errorf("tx.Prepare(%q):\n got  %s\n want %s", tc.q, got, want)
				}
			}

			// A conn pinned by session state prepares on its connection.
			cn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer cn.Close()
			if _, err := cn.ExecContext(ctx, "SET search_path = public"); err != nil {
				t.Fatal(err)
			}
			pcn, err := plain.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer pcn.Close()
			for _, tc := range cases {
				want := prepareOutcome(ctx, pcn, tc.q, tc.args...)
				if got := prepareOutcome(ctx, cn, tc.q, tc.args...); got != want {
					t.Errorf("pinned conn Prepare(%q):\n got  %s\n want %s", tc.q, got, want)
				}
			}
			// A statement closed on the pinned conn is gone from its
			// server session (the text is used nowhere else, so pgx's
			// statement cache cannot hold it either).
			only := "SELECT $1::int - 1 AS pinned_only"
			if got := prepareOutcome(ctx, cn, only, []any{1}); got != "prepared; exec[1]: <nil>" {
				t.Fatalf("pinned conn Prepare(%q): %s", only, got)
			}
			var n int
			if err := cn.QueryRowContext(ctx, "SELECT count(*) FROM pg_prepared_statements WHERE statement = $1", only).Scan(&n); err != nil || n != 0 {
				t.Errorf("a closed statement is still prepared on the pinned connection: %d, %v", n, err)
			}
		})
	}
}

// TestPrepareLeavesNothingPrepared: the description Prepare makes outside a
// transaction is closed on the server at once, and its physical connection
// goes back to the pool (one connection per host here: a leak would hang).
func TestPrepareLeavesNothingPrepared(t *testing.T) {
	for _, inner := range drivers {
		t.Run(inner, func(t *testing.T) {
			db := open(t, inner, "pgreplica_max_conns_per_host=1")
			ctx := ctxFor(t)
			q := "SELECT $1::int * 2"
			for range 3 {
				st, err := db.PrepareContext(ctx, q)
				if err != nil {
					t.Fatal(err)
				}
				st.Close()
				if _, err := db.PrepareContext(ctx, "SELEC 1"); err == nil {
					t.Fatal("Prepare(SELEC 1) succeeded")
				}
			}
			var n int
			err := db.QueryRowContext(ctx, "/* pgreplica:primary */ SELECT count(*) FROM pg_prepared_statements WHERE statement = $1", q).Scan(&n)
			if err != nil || n != 0 {
				t.Fatalf("statements left prepared on the primary's connection: %d, %v", n, err)
			}
		})
	}
}

// TestPrepareCopyIn: lib/pq's COPY FROM STDIN through tx.Prepare works as
// with lib/pq itself, lib/pq's own errors for a bad COPY come through, and
// the transaction knows it wrote (its session sees the rows at once).
func TestPrepareCopyIn(t *testing.T) {
	db := open(t, "pq")
	plain := openPlain(t, "pq")
	ctx := ctxFor(t)
	tbl := table(t, db)

	// Outside a transaction lib/pq refuses COPY.
	_, errP := plain.PrepareContext(ctx, pq.CopyIn(tbl, "v"))
	_, errR := db.PrepareContext(ctx, pq.CopyIn(tbl, "v"))
	if errP == nil || fmt.Sprint(errR) != fmt.Sprint(errP) {
		t.Errorf("CopyIn outside a transaction: got %v, want lib/pq's %v", errR, errP)
	}

	// A column that does not exist: the server's error, at Prepare.
	ptx, err := plain.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, errP = ptx.PrepareContext(ctx, pq.CopyIn(tbl, "nope"))
	ptx.Rollback()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, errR = tx.PrepareContext(ctx, pq.CopyIn(tbl, "nope"))
	tx.Rollback()
	if errP == nil || fmt.Sprint(errR) != fmt.Sprint(errP) {
		t.Errorf("CopyIn of a missing column: got %v, want lib/pq's %v", errR, errP)
	}

	sess := pgreplica.NewSession()
	sctx := pgreplica.WithSession(ctx, sess)
	tx, err = db.BeginTx(sctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := tx.PrepareContext(sctx, pq.CopyIn(tbl, "id", "v"))
	if err != nil {
		t.Fatal(err)
	}
	const rows = 100
	for i := 1; i <= rows; i++ {
		if _, err := st.ExecContext(sctx, i, fmt.Sprint("row ", i)); err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
	}
	if _, err := st.ExecContext(sctx); err != nil {
		t.Fatalf("end of COPY: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if sess.LSN() == 0 {
		t.Errorf("the session did not advance: the COPY's commit was not tracked as a write")
	}
	var n int
	if err := db.QueryRowContext(sctx, "SELECT count(*) FROM "+tbl).Scan(&n); err != nil || n != rows {
		t.Fatalf("read after the COPY = %d, %v; want %d", n, err, rows)
	}
}
