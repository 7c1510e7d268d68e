package drivertest

import (
	"context"
	"database/sql"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
)

// TestRouting proves where each kind of call runs, for both inner drivers.
func TestRouting(t *testing.T) {
	for _, inner := range drivers {
		t.Run(inner, func(t *testing.T) {
			// tuning_wait_after_write: a read right after a write reads
			// the write's position and goes to a replica that has it.
			// Under the default it takes the primary while the write is
			// younger than a capture delay, which WaitCaughtUp below may
			// well take less than (CI saw it on PostgreSQL 13).
			db := open(t, inner, "tuning_wait_after_write=true")
			ctx := ctxFor(t)
			tbl := table(t, db)
			primary := cluster.Primary()

			// Writes, including INSERT … RETURNING through QueryRow, go to
			// the primary.
			if _, err := db.ExecContext(ctx, "INSERT INTO "+tbl+" (v) VALUES ($1)", "a"); err != nil {
				t.Fatal(err)
			}
			if n := servedBy(t, db, ctx, "INSERT INTO "+tbl+" (v) VALUES ($1) RETURNING inet_server_port()", "b"); n != primary {
				t.Errorf("INSERT … RETURNING ran on node %d, want the primary %d", n, primary)
			}
			if n := servedBy(t, db, ctx, "SELECT inet_server_port() FROM "+tbl+" LIMIT 1 FOR UPDATE"); n != primary {
				t.Errorf("SELECT … FOR UPDATE ran on node %d, want the primary", n)
			}

			// Plain reads go to replicas once they have the writes.
			if err := cluster.WaitCaughtUp(ctx); err != nil {
				t.Fatal(err)
			}
			if n := servedBy(t, db, ctx, "SELECT inet_server_port()"); n == primary {
				t.Fatalf("a plain SELECT ran on the primary")
			}
			// Round robin takes an idle replica for a turn of 16 reads:
			// 40 reads cross two turns.
			seen := map[int]bool{}
			for range 40 {
				n := servedBy(t, db, pgreplica.WithEventual(ctx), "SELECT inet_server_port()")
				if n == primary {
					t.Fatalf("a plain SELECT ran on the primary")
				}
				seen[n] = true
			}
			if len(seen) != 2 {
				t.Errorf("reads used replicas %v, want both", seen)
			}
			var inRecovery bool
			if err := db.QueryRowContext(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil || !inRecovery {
				t.Errorf("SELECT pg_is_in_recovery() = %v, %v; want true from a replica", inRecovery, err)
			}
			if n := servedBy(t, db, ctx, "/* pgreplica:primary */ SELECT inet_server_port()"); n != primary {
				t.Errorf("primary hint ignored: node %d", n)
			}
			if n := servedBy(t, db, pgreplica.WithPrimary(ctx), "SELECT inet_server_port()"); n != primary {
				t.Errorf("WithPrimary ignored: node %d", n)
			}

			// Prepared statements are routed each time they run.
			read, err := db.PrepareContext(ctx, "SELECT inet_server_port()")
			if err != nil {
				t.Fatal(err)
			}
			defer read.Close()
			write, err := db.PrepareContext(ctx, "INSERT INTO "+tbl+" (v) VALUES ($1) RETURNING inet_server_port()")
			if err != nil {
				t.Fatal(err)
			}
			defer write.Close()
			for range 3 {
				if n := stmtNode(t, write.QueryRowContext(ctx, "p")); n != primary {
					t.Errorf("prepared INSERT ran on node %d", n)
				}
				if err := cluster.WaitCaughtUp(ctx); err != nil {
					t.Fatal(err)
				}
				if n := stmtNode(t, read.QueryRowContext(ctx)); n == primary {
					t.Errorf("prepared SELECT ran on the primary")
				}
			}

			// Transactions: read-write on the primary, read-only on a
			// replica, serializable read-only on the primary.
			for _, tc := range []struct {
				opts    *sql.TxOptions
				replica bool
			}{
				{nil, false},
				{&sql.TxOptions{ReadOnly: true}, true},
				{&sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead}, true},
				{&sql.TxOptions{ReadOnly: true, Isolation: sql.LevelSerializable}, false},
			} {
				tx, err := db.BeginTx(ctx, tc.opts)
				if err != nil {
					t.Fatal(err)
				}
				n1 := servedBy(t, tx, ctx, "SELECT inet_server_port()")
				n2 := servedBy(t, tx, ctx, "SELECT inet_server_port()")
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
				if n1 != n2 {
					t.Errorf("%+v: one transaction ran on nodes %d and %d", tc.opts, n1, n2)
				}
				if (n1 != primary) != tc.replica {
					t.Errorf("%+v: ran on node %d (primary %d), want replica=%v", tc.opts, n1, primary, tc.replica)
				}
			}
		})
	}
}

// TestSessionStateStaysOnItsConn: SET on a *sql.Conn is seen by that conn
// and by no other.
func TestSessionStateStaysOnItsConn(t *testing.T) {
	for _, inner := range drivers {
		t.Run(inner, func(t *testing.T) {
			db := open(t, inner)
			ctx := ctxFor(t)
			db.SetMaxOpenConns(2)
			if _, err := db.ExecContext(ctx, "CREATE SCHEMA IF NOT EXISTS pinned_app"); err != nil {
				t.Fatal(err)
			}
			cn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cn.ExecContext(ctx, "SET search_path = pinned_app"); err != nil {
				t.Fatal(err)
			}
			var path string
			if err := cn.QueryRowContext(ctx, "SHOW search_path").Scan(&path); err != nil || path != "pinned_app" {
				t.Fatalf("the conn sees search_path %q (%v), want pinned_app", path, err)
			}
			for range 5 {
				if err := db.QueryRowContext(pgreplica.WithPrimary(ctx), "SHOW search_path").Scan(&path); err != nil {
					t.Fatal(err)
				}
				if path == "pinned_app" {
					t.Fatal("another connection sees the pinned conn's search_path")
				}
			}
			cn.Close()
			// After the conn is gone its physical connection carries
			// nothing to anyone else.
			for range 5 {
				if err := db.QueryRowContext(pgreplica.WithPrimary(ctx), "SHOW search_path").Scan(&path); err != nil {
					t.Fatal(err)
				}
				if path == "pinned_app" {
					t.Fatal("search_path leaked after the conn closed")
				}
			}
		})
	}
}

// TestCloseLeavesNothing: after db.Close no server backend of ours remains
// and no goroutine is left behind.
func TestCloseLeavesNothing(t *testing.T) {
	cluster.Need(t)
	for _, inner := range drivers {
		t.Run(inner, func(t *testing.T) {
			before := runtime.NumGoroutine()
			ctx := ctxFor(t)
			dsn := cluster.DSN() + "&pgreplica_driver=" + inner + "&application_name=" + appName(t)
			db, err := sql.Open("pgreplica", dsn)
			if err != nil {
				t.Fatal(err)
			}
			for range 10 {
				var x int
				if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&x); err != nil {
					t.Fatal(err)
				}
				if _, err := db.ExecContext(ctx, "SELECT pg_notify('x', '')"); err != nil {
					t.Fatal(err)
				}
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			for i := range cluster.Len() {
				q := "SELECT count(*) FROM pg_stat_activity WHERE application_name = '" + appName(t) + "'"
				deadline := time.Now().Add(5 * time.Second)
				for {
					n, err := cluster.QueryString(ctx, i, q)
					if err != nil {
						t.Fatal(err)
					}
					if n == "0" {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("node %d still has %s backends of ours after Close", i, n)
					}
					time.Sleep(20 * time.Millisecond) // backends exit asynchronously after the socket closes
				}
			}
			deadline := time.Now().Add(5 * time.Second)
			for runtime.NumGoroutine() > before {
				if time.Now().After(deadline) {
					buf := make([]byte, 1<<16)
					t.Fatalf("goroutines: %d before, %d after Close\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
				}
				time.Sleep(10 * time.Millisecond) // exiting goroutines are not awaitable from outside
			}
		})
	}
}

// TestBadInput: every kind of bad input gets a typed error from Ping.
func TestBadInput(t *testing.T) {
	cluster.Need(t)
	ctx := ctxFor(t)
	replicasOnly := "postgres://postgres@127.0.0.1:" + itoa(cluster.Port(1)) + ",127.0.0.1:" + itoa(cluster.Port(2)) + "/postgres?sslmode=disable"
	for _, tc := range []struct {
		name, dsn string
		want      error
	}{
		{"malformed", "postgres://[::1", pgreplica.ErrBadDSN},
		{"unknown option", cluster.DSN() + "&pgreplica_wait_budgett=1s", pgreplica.ErrUnknownOption},
		{"bad value", cluster.DSN() + "&pgreplica_wait_budget=soon", pgreplica.ErrBadDSN},
		{"unreachable", "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&pgreplica_connect_timeout=1s", pgreplica.ErrNoReachableHost},
		{"every host a replica", replicasOnly, pgreplica.ErrNoPrimary},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// DSN errors come from sql.Open (the driver parses once per
			// DB); everything else from the first use.
			db, err := sql.Open("pgreplica", tc.dsn)
			if err == nil {
				defer db.Close()
				err = db.PingContext(ctx)
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}

	// Every host a replica: reads still work.
	db, _ := sql.Open("pgreplica", replicasOnly)
	defer db.Close()
	var x int
	if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&x); err != nil {
		t.Errorf("read without a primary: %v", err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE nope (a int)"); !errors.Is(err, pgreplica.ErrNoPrimary) {
		t.Errorf("write without a primary: %v, want ErrNoPrimary", err)
	}

	// A cancelled context.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := open(t, "pgx").QueryRowContext(cctx, "SELECT 1").Scan(&x); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v", err)
	}
}
