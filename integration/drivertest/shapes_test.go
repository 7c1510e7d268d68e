package drivertest

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration"
	"github.com/pgreplica/pgreplica/integration/itest"
)

// openShape opens pgreplica on a DSN of the given addresses.
func openShape(t *testing.T, inner string, addrs []string, params ...string) (*sql.DB, *pgreplica.Connector) {
	t.Helper()
	return openDSN(t, integration.HostsDSN(addrs...), append([]string{"pgreplica_driver=" + inner}, params...)...)
}

func primaryAddr() string { return fmt.Sprintf("127.0.0.1:%d", cluster.Port(cluster.Primary())) }

// holdReads keeps n eventual reads open at once, so that n replica
// connections exist, then closes them.
func holdReads(t *testing.T, db *sql.DB, n int) {
	t.Helper()
	ctx := pgreplica.WithEventual(ctxFor(t))
	var held []*sql.Rows
	defer func() {
		for _, r := range held {
			r.Close()
		}
	}()
	for range n {
		r, err := db.QueryContext(ctx, "SELECT 1")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, r)
	}
}

// TestReaderEndpointShowsItsServers: one address round-robins over both
// replicas (HAProxy, as a Kubernetes Service or a cloud reader endpoint
// does). The connector sees two servers behind it, each by the port it
// listens on, and calls the address an endpoint; a direct DSN shows none.
func TestReaderEndpointShowsItsServers(t *testing.T) {
	ep := cluster.ReaderEndpoint(t)
	for _, inner := range []string{"pgx", "pq"} {
		t.Run(inner, func(t *testing.T) {
			db, c := openShape(t, inner, []string{primaryAddr(), ep.Addr()})
			holdReads(t, db, 6)
			ns := c.Nodes()[1]
			if !ns.Endpoint || ns.Pooler {
				t.Fatalf("endpoint %v, pooler %v; want true, false", ns.Endpoint, ns.Pooler)
			}
			var got []string
			for _, s := range ns.Servers {
				got = append(got, s.Addr)
			}
			slices.Sort(got)
			var want []string
			for i := range cluster.Len() {
				if i != cluster.Primary() {
					want = append(want, fmt.Sprintf("127.0.0.1:%d", cluster.Port(i)))
				}
			}
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("servers behind the endpoint %v, want %v", got, want)
			}
		})
	}
	t.Run("direct", func(t *testing.T) {
		db := open(t, "pgx")
		holdReads(t, db, 6)
		c, err := pgreplica.ConnectorOf(ctxFor(t), db)
		if err != nil {
			t.Fatal(err)
		}
		for _, ns := range c.Nodes() {
			if ns.Endpoint || ns.Pooler || ns.Servers != nil {
				t.Fatalf("%s: endpoint %v, pooler %v, servers %v with one server per address", ns.Addr, ns.Endpoint, ns.Pooler, ns.Servers)
			}
		}
	})
}

// TestPoolerDetected: behind PgBouncer the process id of the start-up
// message is PgBouncer's, not the backend's: the connector knows a pooler
// answers for the address, through either inner driver.
func TestPoolerDetected(t *testing.T) {
	b := cluster.PgBouncer(t, 1, integration.PoolTransaction)
	for _, inner := range []string{"pgx", "pq"} {
		t.Run(inner, func(t *testing.T) {
			params := []string{"default_query_exec_mode=exec"}
			if inner == "pq" {
				params = []string{"binary_parameters=yes"}
			}
			db, c := openShape(t, inner, []string{primaryAddr(), b.Addr()}, params...)
			holdReads(t, db, 2)
			if ns := c.Nodes()[1]; !ns.Pooler {
				t.Fatalf("%s behind PgBouncer: pooler %v", ns.Addr, ns.Pooler)
			}
			if ns := c.Nodes()[0]; ns.Pooler || ns.Endpoint {
				t.Fatalf("the primary, direct: pooler %v, endpoint %v", ns.Pooler, ns.Endpoint)
			}
		})
	}
}

// TestRestartBehindPoolerSeen: PgBouncer in transaction mode keeps its
// clients' connections open while the server behind it restarts, so no
// connection of the router fails. The restart is seen all the same, by the
// server's start time on the probe's next answer, with no failed probe: the
// replica restarts right after a probe and is back before the next one.
func TestRestartBehindPoolerSeen(t *testing.T) {
	const replica = 1
	b := cluster.PgBouncer(t, replica, integration.PoolTransaction)
	logs := &recordedLogs{}
	dsn := integration.HostsDSN(primaryAddr(), b.Addr()) + "&application_name=" + appName(t) +
		"&default_query_exec_mode=exec&tuning_monitor_interval=4s"
	cfg, err := itest.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = slog.New(logs)
	_, conn := itest.OpenConfig(t, cfg)
	ctx := ctxFor(t)
	before := conn.Nodes()[replica]
	if before.ServerStartedAt.IsZero() {
		t.Fatal("the probe did not say when the server started")
	}
	// Right after a probe answered: the restart ends before the next one.
	for sampled := before.Sampled; conn.Nodes()[replica].Sampled.Equal(sampled); {
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	start := time.Now()
	if err := cluster.Kill(replica); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Start(ctx, replica); err != nil {
		t.Fatal(err)
	}
	t.Logf("replica %d down and back in %v", replica, time.Since(start).Round(time.Millisecond))
	for !conn.Nodes()[replica].ServerStartedAt.After(before.ServerStartedAt) {
		select {
		case <-ctx.Done():
			t.Fatal("the restart behind the pooler was not seen")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if !logs.has("pgreplica: host restarted") {
		t.Errorf("no restart logged: %v", logs.all())
	}
	if logs.has("pgreplica: host unreachable") {
		t.Errorf("a probe failed, the restart was not short enough to test its detection: %v", logs.all())
	}
}

// recordedLogs is a slog.Handler that keeps the messages.
type recordedLogs struct {
	mu   sync.Mutex
	msgs []string
}

func (l *recordedLogs) Enabled(context.Context, slog.Level) bool { return true }
func (l *recordedLogs) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	return nil
}
func (l *recordedLogs) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *recordedLogs) WithGroup(string) slog.Handler      { return l }

func (l *recordedLogs) has(msg string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Contains(l.msgs, msg)
}

func (l *recordedLogs) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.msgs, "; ")
}

// TestStalenessBoundBehindEndpoint: a read that accepts a bounded lag
// (WithMaxStaleness) through a reader endpoint is held to that bound on
// the server its connection reaches, not on the lag of the one server the
// monitor's probe reached. The endpoint round-robins over a replica that
// replays and one whose replay is paused, the probe sits on the first:
// every read sees data at most about the bound old, and some are served
// by the replica that keeps up.
func TestStalenessBoundBehindEndpoint(t *testing.T) {
	ep := cluster.ReaderEndpoint(t)
	for _, inner := range drivers {
		t.Run(inner, func(t *testing.T) {
			ctx := ctxFor(t)
			db, c := openShape(t, inner, []string{primaryAddr(), ep.Addr()}, "tuning_monitor_interval=50ms")
			tbl := table(t, db)
			if _, err := db.ExecContext(ctx, "INSERT INTO "+tbl+" (id, v) VALUES (1, clock_timestamp()::text)"); err != nil {
				t.Fatal(err)
			}
			// The table and its row on both replicas before the bound is
			// tried: a read bounded to 300 ms may rightly miss what is
			// younger.
			if err := cluster.WaitCaughtUp(ctx); err != nil {
				t.Fatal(err)
			}
			holdReads(t, db, 4) // both servers known behind the endpoint
			stale := pausedBesideProbe(t, c)
			mustExec(t, stale, "SELECT pg_wal_replay_pause()")
			defer mustExec(t, stale, "SELECT pg_wal_replay_resume()")

			// The writer keeps the primary's time of every value it
			// wrote: a read's value is stale by how long ago the next one
			// replaced it (with slow commits, the newest value may be old
			// and still current).
			var mu sync.Mutex
			var writes []time.Time
			var writeErr error
			stop := loop(1, func(int) {
				var v string
				err := db.QueryRowContext(ctx, "UPDATE "+tbl+" SET v = clock_timestamp()::text WHERE id = 1 RETURNING v").Scan(&v)
				var w time.Time
				if err == nil {
					w, err = time.Parse(pgTimeLayout, v)
				}
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					writeErr = err
					return
				}
				writes = append(writes, w)
			})
			defer stop()
			// The slack covers how late the monitor's samples of the
			// primary may be on a loaded machine; a paused server falls
			// behind by the whole run, seconds.
			const bound, slack = 300 * time.Millisecond, 600 * time.Millisecond
			rctx := pgreplica.WithMaxStaleness(ctx, bound)
			before := c.Stats().ReplicaReads
			end := time.Now().Add(2500 * time.Millisecond)
			for time.Now().Before(end) {
				start := time.Now()
				var v string
				var port int
				if err := db.QueryRowContext(rctx, "SELECT v, inet_server_port() FROM "+tbl+" WHERE id = 1").Scan(&v, &port); err != nil {
					t.Fatal(err)
				}
				written, err := time.Parse(pgTimeLayout, v)
				if err != nil {
					t.Fatal(err)
				}
				mu.Lock()
				if writeErr != nil {
					t.Fatalf("the writer failed: %v", writeErr)
				}
				i, _ := slices.BinarySearchFunc(writes, written, func(a, b time.Time) int { return a.Compare(b) })
				for i < len(writes) && !writes[i].After(written) {
					i++
				}
				var replaced time.Time
				if i < len(writes) {
					replaced = writes[i]
				}
				mu.Unlock()
				if !replaced.IsZero() && start.Sub(replaced) > bound+slack {
					t.Fatalf("a read bounded to %v of lag saw a value the primary replaced %v before the read began, on node %d (replica %d paused)",
						bound, start.Sub(replaced).Round(time.Millisecond), nodeOf(t, port), stale)
				}
			}
			if n := c.Stats().ReplicaReads - before; n == 0 {
				t.Fatal("no read was served by the replica that keeps up")
			}
		})
	}
}

// pausedBesideProbe returns the node index of the server behind the
// endpoint (the connector's second host) that the monitor's probe does
// not reach: the probe's server is the one seen again after every other
// connection was made.
func pausedBesideProbe(t *testing.T, c *pgreplica.Connector) int {
	t.Helper()
	made := time.Now()
	ctx := ctxFor(t)
	for {
		var probed, other []pgreplica.ServerStatus
		for _, s := range c.Nodes()[1].Servers {
			if s.LastSeen.After(made) {
				probed = append(probed, s)
			} else {
				other = append(other, s)
			}
		}
		if len(probed) == 1 && len(other) == 1 {
			return nodeOf(t, other[0].Port)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the probe's server behind the endpoint was not found: %+v", c.Nodes()[1].Servers)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// pgTimeLayout reads a timestamptz as PostgreSQL writes it as text.
const pgTimeLayout = "2006-01-02 15:04:05.999999-07"
