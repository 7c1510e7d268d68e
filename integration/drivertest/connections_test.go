package drivertest

import (
	"database/sql"
	"strconv"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
)

// TestNoConnectionBeyondThePool: a process that writes and reads its
// writes back holds, on the primary, the connections its pool needs and
// no more once probes and captures have run on the pooled one (the
// monitor's own connection, which served them before the pool held one,
// is closed after 5 s unused), and the primary is still probed.
func TestNoConnectionBeyondThePool(t *testing.T) {
	for _, inner := range drivers {
		t.Run(inner, func(t *testing.T) {
			// tuning_wait_after_write: every read after a write reads
			// the write's position, on demand.
			db := open(t, inner, "tuning_wait_after_write=true")
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
			// One pooled connection (one statement at a time), and the
			// monitor's until it has gone unused for 5 s.
			primary := primaryIndex(t, c)
			var got string
			for deadline := time.Now().Add(15 * time.Second); ; {
				got, err = cluster.QueryString(ctx, cluster.Primary(),
					"SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", appName(t))
				if err != nil {
					t.Fatal(err)
				}
				if got == "1" || time.Now().After(deadline) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if got != "1" {
				t.Fatalf("%s connections on the primary 15 s after the last statement, want 1: the pool's, which the monitor probes on", got)
			}
			before := c.Nodes()[primary].Sampled
			for c.Nodes()[primary].Sampled.Equal(before) {
				if ctx.Err() != nil {
					t.Fatal("the primary is no longer probed")
				}
				time.Sleep(10 * time.Millisecond)
			}
			if got, err = cluster.QueryString(ctx, cluster.Primary(),
				"SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", appName(t)); err != nil || got != "1" {
				t.Errorf("%s connections on the primary after a probe (%v), want 1", got, err)
			}
		})
	}
}

// TestHandlesShareTheMonitor: two handles on one connection string (an
// ORM's second *sql.DB, a migration tool's) share the process's monitor:
// one probe connection on each server, not one per handle. A handle on
// another connection string has its own. Closing one handle leaves the
// other watched. Counted on the replicas, where no statement ran (each
// handle's Ping borrowed a pooled connection on the primary, which the
// monitor may probe on), so every connection counted is a monitor's.
func TestHandlesShareTheMonitor(t *testing.T) {
	for _, inner := range drivers {
		t.Run(inner, func(t *testing.T) {
			ctx := ctxFor(t)
			probeConns := func(srv int) int {
				t.Helper()
				got, err := cluster.QueryString(ctx, srv,
					"SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", appName(t))
				if err != nil {
					t.Fatal(err)
				}
				n, _ := strconv.Atoi(got)
				return n
			}
			first := open(t, inner)
			second := open(t, inner)
			for _, db := range []*sql.DB{first, second} {
				awaitProbed(t, db)
			}
			replica := (cluster.Primary() + 1) % cluster.Len()
			for srv := range cluster.Len() {
				if srv == cluster.Primary() {
					continue
				}
				if got := probeConns(srv); got != 1 {
					t.Errorf("server %d: %d probe connections for two handles on one DSN, want 1", srv, got)
				}
			}
			// Another DSN: a monitor of its own.
			other := open(t, inner, "tuning_probe_timeout=900ms")
			awaitProbed(t, other)
			if got := probeConns(replica); got != 2 {
				t.Errorf("replica: %d probe connections with a handle on another DSN, want 2", got)
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
			if got := probeConns(replica); got != 1 {
				t.Errorf("replica: %d probe connections after the first handle closed, want 1", got)
			}
		})
	}
}

// awaitProbed waits until db's monitor has its first answers from every
// server: the probe on a new connection and the one right behind it,
// which measures the round trip (then none comes before the next
// interval).
func awaitProbed(t *testing.T, db *sql.DB) {
	t.Helper()
	ctx := ctxFor(t)
	c, err := pgreplica.ConnectorOf(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	for {
		probed := true
		for _, n := range c.Nodes() {
			probed = probed && !n.Sampled.IsZero() && n.RTT > 0
		}
		if probed {
			return
		}
		if ctx.Err() != nil {
			t.Fatal("a server was never probed")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// primaryIndex is the index in c.Nodes() of the primary.
func primaryIndex(t *testing.T, c *pgreplica.Connector) int {
	t.Helper()
	for i, n := range c.Nodes() {
		if n.Role == pgreplica.RolePrimary {
			return i
		}
	}
	t.Fatal("no primary known")
	return -1
}
