package drivertest

import (
	"database/sql"
	"errors"
	"testing"
)

// TestProcessDefaultSpansDBs: the "process" default means the process.
// Two *sql.DB opened on the same DSN (an ORM's second handle, a migration
// tool, a test helper) see each other's writes at once, with every
// replica's replay paused: a row inserted through one is read through the
// other, and a table dropped through one is gone for the other.
func TestProcessDefaultSpansDBs(t *testing.T) {
	for _, inner := range drivers {
		t.Run(inner, func(t *testing.T) {
			writer := open(t, inner)
			reader := open(t, inner)
			ctx := ctxFor(t)
			tbl := table(t, writer)
			if err := cluster.WaitCaughtUp(ctx); err != nil {
				t.Fatal(err)
			}
			cluster.PauseReplicas(t)

			if _, err := writer.ExecContext(ctx, "INSERT INTO "+tbl+" (v) VALUES ('seen')"); err != nil {
				t.Fatal(err)
			}
			var v string
			var port int
			q := "SELECT v, inet_server_port() FROM " + tbl + " WHERE v = 'seen'"
			if err := reader.QueryRowContext(ctx, q).Scan(&v, &port); err != nil {
				t.Fatalf("read through the second *sql.DB right after the insert: %v", err)
			}
			if nodeOf(t, port) != cluster.Primary() {
				t.Fatal("served by a paused replica, which cannot have the row")
			}

			if _, err := writer.ExecContext(ctx, "DROP TABLE "+tbl); err != nil {
				t.Fatal(err)
			}
			err := reader.QueryRowContext(ctx, "SELECT count(*) FROM "+tbl).Scan(new(int))
			if err == nil || errors.Is(err, sql.ErrNoRows) {
				t.Fatalf("the dropped table is still there for the second *sql.DB: %v", err)
			}
		})
	}
}
