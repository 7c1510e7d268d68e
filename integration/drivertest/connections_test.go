package drivertest

import (
	"database/sql"
	"strconv"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
)

// TestOneConnectionBeyondThePool: a process that writes and reads its
// writes back holds, on the primary, the connections its pool needs and
// one more, the monitor's, which captures of write positions borrow.
func TestOneConnectionBeyondThePool(t *testing.T) {
	for _, inner := range drivers {
		t.Run(inner, func(t *testing.T) {
			// read_after_write=replica: every read after a write reads
			// the write's position, on demand.
			db := open(t, inner, "pgreplica_read_after_write=replica")
			db.SetMaxOpenConns(1)
			ctx := ctxFor(t)
			tbl := table(t, db)
			for i := range 20 {
				if _, err := db.ExecContext(ctx, "INSERT INTO "+tbl+" (v) VALUES ($1)", strconv.Itoa(i)); err != nil {
					t.Fatal(err)
				}
				var n int
				if err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+tbl).Scan(&n); err != nil {
					t.Fatal(err)
				}
				if n != i+1 {
					t.Fatalf("read %d rows after writing %d", n, i+1)
				}
			}
			c, err := pgreplica.ConnectorOf(ctx, db)
			if err != nil {
				t.Fatal(err)
			}
			if s := c.Stats(); s.LSNCaptures == 0 {
				t.Fatalf("no write position was read (stats %+v)", s)
			}
			got, err := cluster.QueryString(ctx, cluster.Primary(),
				"SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", appName(t))
			if err != nil {
				t.Fatal(err)
			}
			// One pooled connection (one statement at a time) and the
			// monitor's.
			if got != "2" {
				t.Errorf("%s connections on the primary, want 2: the pool's and the monitor's", got)
			}
		})
	}
}

// TestHandlesShareTheMonitor: two handles on one connection string (an
// ORM's second *sql.DB, a migration tool's) share the process's monitor:
// one probe connection on each server, not one per handle. A handle on
// another connection string has its own. Closing one handle leaves the
// other watched.
func TestHandlesShareTheMonitor(t *testing.T) {
	for _, inner := range drivers {
		t.Run(inner, func(t *testing.T) {
			ctx := ctxFor(t)
			probeConns := func(srv int) int {
				t.Helper()
				got, err := cluster.QueryString(ctx, srv,
					"SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE '%pg_is_in_recovery%'", appName(t))
				if err != nil {
					t.Fatal(err)
				}
				n, _ := strconv.Atoi(got)
				return n
			}
			first := open(t, inner)
			second := open(t, inner)
			for _, db := range []*sql.DB{first, second} {
				if _, err := db.ExecContext(ctx, "SELECT 1"); err != nil {
					t.Fatal(err)
				}
			}
			for srv := range cluster.Len() {
				if got := probeConns(srv); got != 1 {
					t.Errorf("server %d: %d probe connections for two handles on one DSN, want 1", srv, got)
				}
			}
			// Another DSN: a monitor of its own.
			other := open(t, inner, "pgreplica_probe_timeout=900ms")
			if err := other.PingContext(ctx); err != nil {
				t.Fatal(err)
			}
			if got := probeConns(cluster.Primary()); got != 2 {
				t.Errorf("primary: %d probe connections with a handle on another DSN, want 2", got)
			}
			other.Close()

			// The first handle goes: the second keeps being watched.
			first.Close()
			c, err := pgreplica.ConnectorOf(ctx, second)
			if err != nil {
				t.Fatal(err)
			}
			before := c.Nodes()[0].Sampled
			for c.Nodes()[0].Sampled.Equal(before) {
				if ctx.Err() != nil {
					t.Fatal("no probe reached the second handle after the first was closed")
				}
				select {
				case <-ctx.Done():
				case <-time.After(10 * time.Millisecond):
				}
			}
			if got := probeConns(cluster.Primary()); got != 1 {
				t.Errorf("primary: %d probe connections after the first handle closed, want 1", got)
			}
		})
	}
}
