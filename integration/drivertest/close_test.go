package drivertest

import (
	"database/sql"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// TestCloseWithLeakedRowsAndTx: db.Close returns at once when the
// application leaked rows, a transaction and a pinned conn (pgx and lib/pq
// do not wait for them either), closes their server connections, and
// leaves them failing, not hanging or panicking; no goroutine stays behind.
func TestCloseWithLeakedRowsAndTx(t *testing.T) {
	for _, inner := range drivers {
		t.Run(inner, func(t *testing.T) {
			cluster.Need(t)
			ctx := ctxFor(t)
			app := appName(t)
			before := runtime.NumGoroutine()
			db, err := sql.Open("pgreplica", cluster.DSN()+"&pgreplica_driver="+inner+"&application_name="+app)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()

			// Far more rows than fit in the client's buffers.
			rows, err := db.QueryContext(ctx, "SELECT g FROM generate_series(1, 1000000) g")
			if err != nil {
				t.Fatal(err)
			}
			if !rows.Next() {
				t.Fatal(rows.Err())
			}
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.ExecContext(ctx, "SELECT 1"); err != nil {
				t.Fatal(err)
			}
			cn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cn.ExecContext(ctx, "SET search_path = public"); err != nil {
				t.Fatal(err)
			}
			if n := backends(t, app); n < 3 {
				t.Fatalf("%d backends of the test before Close, want at least 3", n)
			}

			start := time.Now()
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			if took > 500*time.Millisecond {
				t.Errorf("db.Close took %v with rows, a transaction and a conn still borrowed", took)
			}
			deadline := time.Now().Add(10 * time.Second)
			for n := backends(t, app); n > 0; n = backends(t, app) {
				if time.Now().After(deadline) {
					t.Fatalf("%d backends of the test still on the servers after Close", n)
				}
				time.Sleep(20 * time.Millisecond) // polling the servers
			}

			n := 1
			for rows.Next() {
				n++
			}
			if rows.Err() == nil {
				t.Errorf("leaked rows ended without an error after %d of 1000000 rows", n)
			}
			t.Logf("Close took %v; the leaked rows ended after %d rows with: %v", took, n, rows.Err())
			if err := rows.Close(); err != nil {
				t.Logf("rows.Close after db.Close: %v", err)
			}
			if err := tx.Commit(); err == nil {
				t.Errorf("Commit of the leaked transaction succeeded after db.Close")
			} else {
				t.Logf("Commit of the leaked transaction: %v", err)
			}
			if _, err := cn.ExecContext(ctx, "SELECT 1"); err == nil {
				t.Errorf("the leaked conn still runs statements after db.Close")
			} else {
				t.Logf("the leaked conn: %v", err)
			}
			cn.Close()

			deadline = time.Now().Add(10 * time.Second)
			for runtime.NumGoroutine() > before {
				if time.Now().After(deadline) {
					buf := make([]byte, 1<<20)
					t.Fatalf("%d goroutines, %d before Open:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
				}
				time.Sleep(5 * time.Millisecond) // awaiting goroutines that end on their own
			}
		})
	}
}

// backends counts the server sessions of application app on every node.
func backends(t *testing.T, app string) int {
	t.Helper()
	total := 0
	for i := range cluster.Len() {
		s, err := cluster.QueryString(ctxFor(t), i, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", app)
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		total += n
	}
	return total
}
