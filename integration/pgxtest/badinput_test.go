package pgxtest

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/pgreplicapgx"
)

// TestBadInput: bad input gives pgreplica's typed errors, as the driver
// does, never a panic; nothing is left running after Close.
func TestBadInput(t *testing.T) {
	cluster.Need(t)
	ctx := ctxFor(t)
	before := runtime.NumGoroutine()
	for dsn, want := range map[string]error{
		"postgres://%zz@h/db":                            pgreplica.ErrBadDSN,
		"postgres://h/db?pgreplica_wait_budget=soon":     pgreplica.ErrBadDSN,
		"postgres://h1,h2/db?pgreplica_no_such_option=1": pgreplica.ErrUnknownOption,
	} {
		if _, err := pgreplicapgx.New(ctx, dsn); !errors.Is(err, want) {
			t.Errorf("New(%q): %v, want %v", dsn, err, want)
		}
	}
	if _, err := pgreplicapgx.New(ctx, cluster.DSN()+"&pgreplica_driver=pq"); !errors.Is(err, pgreplica.ErrBadConfig) {
		t.Errorf("lib/pq as the inner driver: %v, want ErrBadConfig", err)
	}

	unreachable, err := pgreplicapgx.New(ctx, "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&pgreplica_connect_timeout=1s")
	if err != nil {
		t.Fatal(err)
	}
	if err := unreachable.Ping(ctx); !errors.Is(err, pgreplica.ErrNoReachableHost) {
		t.Errorf("Ping of an unreachable host: %v, want ErrNoReachableHost", err)
	}
	if _, err := unreachable.Exec(ctx, "SELECT 1"); !errors.Is(err, pgreplica.ErrNoReachableHost) {
		t.Errorf("Exec on an unreachable host: %v, want ErrNoReachableHost", err)
	}
	unreachable.Close()

	pool, _ := open(t)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := pool.Exec(cancelled, "SELECT 1"); !errors.Is(err, context.Canceled) {
		t.Errorf("Exec with a cancelled context: %v", err)
	}
	if err := pool.QueryRow(cancelled, "SELECT 1").Scan(new(int)); !errors.Is(err, context.Canceled) {
		t.Errorf("QueryRow with a cancelled context: %v", err)
	}
	if err := pool.SendBatch(cancelled, &pgx.Batch{QueuedQueries: []*pgx.QueuedQuery{{SQL: "SELECT 1"}}}).Close(); !errors.Is(err, context.Canceled) {
		t.Errorf("SendBatch with a cancelled context: %v", err)
	}
	if _, err := pool.Begin(cancelled); !errors.Is(err, context.Canceled) {
		t.Errorf("Begin with a cancelled context: %v", err)
	}
	// A statement cancelled while it runs leaves a usable pool.
	short, cancel2 := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel2()
	if _, err := pool.Exec(short, "SELECT pg_sleep(5)"); err == nil {
		t.Error("pg_sleep(5) with a 50ms deadline succeeded")
	}
	var one int
	if err := pool.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("after a cancelled statement: %d, %v", one, err)
	}
	pool.Close()
	if _, err := pool.Exec(ctx, "SELECT 1"); !errors.Is(err, pgreplica.ErrClosed) {
		t.Errorf("Exec after Close: %v, want ErrClosed", err)
	}

	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines after Close, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}
