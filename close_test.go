package pgreplica

import (
	"runtime"
	"testing"
	"time"

	"github.com/DATA-DOG/go-sqlmock"
)

// TestCloseDoesNotWaitForBorrowed: rows and a transaction the application
// never closed do not hold db.Close up (pgx and lib/pq return at once);
// using them afterwards fails instead of panicking or hanging, and no
// goroutine is left behind.
func TestCloseDoesNotWaitForBorrowed(t *testing.T) {
	mc := newMockCluster(t, 1, func(c *Config) { c.Consistency = ConsistencyEventual })
	before := runtime.NumGoroutine() // the mocks' own *sql.DBs run until the test ends
	mc.mocks[1].ExpectQuery("SELECT v FROM t").WillReturnRows(sqlmock.NewRows([]string{"v"}).AddRow(1).AddRow(2))
	mc.mocks[0].ExpectBegin()
	rows, err := mc.db.Query("SELECT v FROM t")
	if err != nil {
		t.Fatal(err)
	}
	tx, err := mc.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := mc.db.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("db.Close took %v with rows and a transaction open, want well under a second", d)
	}
	if err := tx.Commit(); err == nil {
		t.Errorf("Commit of a transaction whose connection Close took succeeded")
	}
	rows.Close()
	awaitGoroutines(t, before)
}

// awaitGoroutines waits until no more goroutines run than before.
func awaitGoroutines(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		runtime.Gosched()
		time.Sleep(time.Millisecond)
	}
}
