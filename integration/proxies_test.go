package integration_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgreplica/pgreplica/integration"
)

// maxRestartDowntime bounds how long a restarted proxy refuses
// connections.
const maxRestartDowntime = 250 * time.Millisecond

// connectVia opens a pgx connection to dsn with the given
// default_query_exec_mode ("" for pgx's default), closed when t ends.
func connectVia(t *testing.T, ctx context.Context, dsn, mode string) *pgx.Conn {
	t.Helper()
	if mode != "" {
		dsn += "&default_query_exec_mode=" + mode
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// serverPort returns inet_server_port() over conn, with a parameter so
// that the extended protocol carries it.
func serverPort(ctx context.Context, conn *pgx.Conn) (int, error) {
	var port, one int
	err := conn.QueryRow(ctx, "SELECT inet_server_port(), $1::int", 1).Scan(&port, &one)
	return port, err
}

// TestPgBouncerTransactionMode: PgBouncer in transaction mode in front of
// each node answers pgx with default_query_exec_mode=exec and
// simple_protocol (the two modes that need no server-side prepared
// statement), statements and transactions, and the server that answers is
// the node behind it.
func TestPgBouncerTransactionMode(t *testing.T) {
	cluster.Need(t)
	ctx := testCtx(t)
	for i := range cluster.Len() {
		b := cluster.PgBouncer(t, i, integration.PoolTransaction)
		if b.Node() != i || b.Mode() != integration.PoolTransaction {
			t.Fatalf("PgBouncer of node %d says node %d, mode %s", i, b.Node(), b.Mode())
		}
		for _, mode := range []string{"exec", "simple_protocol"} {
			t.Run(fmt.Sprintf("node%d/%s", i, mode), func(t *testing.T) {
				conn := connectVia(t, ctx, b.DSN(), mode)
				for range 3 {
					port, err := serverPort(ctx, conn)
					if err != nil {
						t.Fatal(err)
					}
					if port != cluster.Port(i) {
						t.Fatalf("inet_server_port() = %d through the PgBouncer of node %d, want %d", port, i, cluster.Port(i))
					}
				}
				tx, err := conn.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
				if err != nil {
					t.Fatal(err)
				}
				var recovery bool
				if err := tx.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&recovery); err != nil {
					t.Fatal(err)
				}
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
				if recovery != (i != cluster.Primary()) {
					t.Fatalf("node %d: pg_is_in_recovery() = %v through PgBouncer", i, recovery)
				}
			})
		}
	}
}

// TestPgBouncerRestart: a restart of the PgBouncer process is short, drops
// the client connections (the old connection fails) and a new connection
// answers at once.
func TestPgBouncerRestart(t *testing.T) {
	cluster.Need(t)
	ctx := testCtx(t)
	for _, mode := range []integration.PoolMode{integration.PoolSession, integration.PoolTransaction} {
		t.Run(string(mode), func(t *testing.T) {
			b := cluster.PgBouncer(t, 1, mode)
			before := b.Addr()
			old := connectVia(t, ctx, b.DSN(), "exec")
			if _, err := serverPort(ctx, old); err != nil {
				t.Fatal(err)
			}
			down, err := b.Restart(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("PgBouncer (%s) restarted with %v of downtime", mode, down)
			if down > maxRestartDowntime {
				t.Errorf("restart took %v, want under %v", down, maxRestartDowntime)
			}
			if b.Addr() != before || !b.Running() {
				t.Fatalf("after Restart: %s (running %v), want %s", b.Addr(), b.Running(), before)
			}
			if _, err := serverPort(ctx, old); err == nil {
				t.Errorf("the client connection from before the restart still answers")
			} else {
				t.Logf("the client connection from before the restart fails: %v", err)
			}
			port, err := serverPort(ctx, connectVia(t, ctx, b.DSN(), "exec"))
			if err != nil {
				t.Fatal(err)
			}
			if port != cluster.Port(1) {
				t.Fatalf("inet_server_port() = %d after the restart, want %d", port, cluster.Port(1))
			}
		})
	}
}

// TestPgBouncerKeepsClientsAcrossServerRestart: in transaction mode a
// client holds no server connection between transactions, so the same
// client connection answers again once the server behind PgBouncer has
// been restarted (stopped, or killed) and is back: the answer comes from a
// new postmaster (pg_postmaster_start_time() changed) and reports the
// same server port.
func TestPgBouncerKeepsClientsAcrossServerRestart(t *testing.T) {
	cluster.Need(t)
	ctx := testCtx(t)
	const node = 2
	b := cluster.PgBouncer(t, node, integration.PoolTransaction)
	conn := connectVia(t, ctx, b.DSN(), "exec")
	started := func() string {
		t.Helper()
		var s string
		var port int
		if err := conn.QueryRow(ctx, "SELECT pg_postmaster_start_time()::text, inet_server_port()").Scan(&s, &port); err != nil {
			t.Fatal(err)
		}
		if port != cluster.Port(node) {
			t.Fatalf("inet_server_port() = %d, want %d", port, cluster.Port(node))
		}
		return s
	}
	first := started()
	for _, how := range []string{"stop", "kill"} {
		var err error
		if how == "stop" {
			err = cluster.Stop(ctx, node)
		} else {
			err = cluster.Kill(node)
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := cluster.Start(ctx, node); err != nil {
			t.Fatal(err)
		}
		again := started()
		t.Logf("after a %s and start of node %d the same client connection answers: postmaster started at %s, before %s", how, node, again, first)
		if again == first {
			t.Fatalf("pg_postmaster_start_time() did not change across the %s: %s", how, again)
		}
		first = again
	}
	if err := cluster.WaitStreaming(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestHAProxyEndpoint: new connections through the reader endpoint reach
// both replicas in turn, the server port still names the node behind it,
// and a restart is short, drops the connections, and new ones answer.
func TestHAProxyEndpoint(t *testing.T) {
	cluster.Need(t)
	ctx := testCtx(t)
	h := cluster.ReaderEndpoint(t)
	replicas := map[int]bool{}
	for _, i := range h.Nodes() {
		replicas[cluster.Port(i)] = true
	}
	if len(replicas) != 2 {
		t.Fatalf("the endpoint is over nodes %v, want the two replicas", h.Nodes())
	}
	reached := func() map[int]int {
		t.Helper()
		seen := map[int]int{}
		for range 8 {
			conn, err := pgx.Connect(ctx, h.DSN())
			if err != nil {
				t.Fatal(err)
			}
			port, err := serverPort(ctx, conn)
			conn.Close(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !replicas[port] {
				t.Fatalf("a connection through the endpoint reached port %d, not a replica", port)
			}
			seen[port]++
		}
		return seen
	}
	if seen := reached(); len(seen) != 2 {
		t.Fatalf("8 connections through the endpoint reached %v, want both replicas", seen)
	}
	old, err := pgx.Connect(ctx, h.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close(ctx)
	down, err := h.Restart(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("HAProxy restarted with %v of downtime", down)
	if down > maxRestartDowntime {
		t.Errorf("restart took %v, want under %v", down, maxRestartDowntime)
	}
	if _, err := serverPort(ctx, old); err == nil {
		t.Errorf("the client connection from before the restart still answers")
	}
	if seen := reached(); len(seen) != 2 {
		t.Fatalf("after the restart 8 connections reached %v, want both replicas", seen)
	}
}

// TestPgBouncerOverEndpoint: PgBouncer in transaction mode in front of
// the reader endpoint spreads one client's transactions over the
// replicas (its server connections go to either), which is why a read
// must be proven fresh on the backend that runs it.
func TestPgBouncerOverEndpoint(t *testing.T) {
	cluster.Need(t)
	ctx := testCtx(t)
	h := cluster.ReaderEndpoint(t)
	b := integration.NewPgBouncer(t, integration.PgBouncerOptions{Upstream: h.Addr(), Mode: integration.PoolTransaction})
	// Two clients busy at once make PgBouncer open two server
	// connections; round robin sends them to both replicas.
	c1 := connectVia(t, ctx, b.DSN(), "exec")
	c2 := connectVia(t, ctx, b.DSN(), "exec")
	tx, err := c1.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var p1 int
	if err := tx.QueryRow(ctx, "SELECT inet_server_port()").Scan(&p1); err != nil {
		t.Fatal(err)
	}
	p2, err := serverPort(ctx, c2) // c1's transaction holds its server connection
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if p1 == p2 {
		t.Fatalf("two server connections of PgBouncer through the endpoint reached the same server (port %d)", p1)
	}
	seen := map[int]bool{}
	for range 20 {
		port, err := serverPort(ctx, c1)
		if err != nil {
			t.Fatal(err)
		}
		seen[port] = true
	}
	t.Logf("one client's 20 statements ran on servers %v", seen)
}

// TestBackendKeyDataThroughProxies records what a client learns of the
// server at start-up through each proxy: the process id in BackendKeyData
// against pg_backend_pid(), and the reported in_hot_standby.
//
// HAProxy forwards bytes: the process id is the backend's and
// in_hot_standby is the server's own. PgBouncer answers the start-up
// itself: BackendKeyData carries a key of its own, not the backend's pid,
// and the parameters it reports are those it learned from a server
// connection of the pool, which may not be the one running the next
// statement.
func TestBackendKeyDataThroughProxies(t *testing.T) {
	cluster.Need(t)
	ctx := testCtx(t)
	s, err := cluster.QueryString(ctx, 0, "SELECT current_setting('server_version_num')::int / 10000")
	if err != nil {
		t.Fatal(err)
	}
	major, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	hotStandby := major >= 14 // PostgreSQL 14 reports in_hot_standby
	h := cluster.ReaderEndpoint(t)
	type via struct {
		name    string
		dsn     string
		samePID bool
		standby string // want in_hot_standby
		mode    string
	}
	vias := []via{
		{name: "direct replica", dsn: cluster.NodeDSN(1), samePID: true, standby: "on"},
		{name: "HAProxy endpoint", dsn: h.DSN(), samePID: true, standby: "on"},
	}
	for _, mode := range []integration.PoolMode{integration.PoolSession, integration.PoolTransaction} {
		vias = append(vias,
			via{name: "PgBouncer " + string(mode) + " primary", dsn: cluster.PgBouncer(t, 0, mode).DSN(), standby: "off", mode: "exec"},
			via{name: "PgBouncer " + string(mode) + " replica", dsn: cluster.PgBouncer(t, 1, mode).DSN(), standby: "on", mode: "exec"})
	}
	for _, v := range vias {
		conn := connectVia(t, ctx, v.dsn, v.mode)
		var pid int
		if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			t.Fatal(err)
		}
		keyPID := int(conn.PgConn().PID())
		reported := conn.PgConn().ParameterStatus("in_hot_standby")
		t.Logf("%s: BackendKeyData pid %d, pg_backend_pid() %d; in_hot_standby %q", v.name, keyPID, pid, reported)
		if (keyPID == pid) != v.samePID {
			t.Errorf("%s: BackendKeyData pid %d, pg_backend_pid() %d: want them %s", v.name, keyPID, pid,
				map[bool]string{true: "equal", false: "different"}[v.samePID])
		}
		if hotStandby && reported != v.standby {
			t.Errorf("%s: in_hot_standby reported %q, want %q", v.name, reported, v.standby)
		}
	}
}

// tbRecorder is a testing.TB that records Skip and Fatal instead of
// ending the test that runs it.
type tbRecorder struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (r *tbRecorder) Helper()        {}
func (r *tbRecorder) Cleanup(func()) {}
func (r *tbRecorder) Skip(args ...any) {
	r.skipped, r.msg = true, fmt.Sprint(args...)
	runtime.Goexit()
}
func (r *tbRecorder) Fatal(args ...any) {
	r.failed, r.msg = true, fmt.Sprint(args...)
	runtime.Goexit()
}

// TestMissingProxyProgram: without the program, starting a proxy fails
// with ErrNoPgBouncer or ErrNoHAProxy, and the test helpers skip the test,
// or fail it under PGREPLICA_INTEGRATION=require.
func TestMissingProxyProgram(t *testing.T) {
	missing := t.TempDir() + "/absent"
	t.Setenv(integration.PgBouncerEnv, missing)
	t.Setenv(integration.HAProxyEnv, missing)
	starts := map[string]func(tb testing.TB){
		"pgbouncer": func(tb testing.TB) {
			integration.NewPgBouncer(tb, integration.PgBouncerOptions{Upstream: "127.0.0.1:1"})
		},
		"haproxy": func(tb testing.TB) {
			integration.NewHAProxy(tb, integration.HAProxyOptions{Backends: []string{"127.0.0.1:1"}})
		},
	}
	for name, start := range starts {
		for _, require := range []bool{false, true} {
			t.Run(name+"/require="+strconv.FormatBool(require), func(t *testing.T) {
				if require {
					t.Setenv(integration.RequireEnv, "require")
				} else {
					t.Setenv(integration.RequireEnv, "")
				}
				r := &tbRecorder{TB: t}
				done := make(chan struct{})
				go func() {
					defer close(done)
					start(r)
				}()
				<-done
				if r.skipped == require || r.failed != require {
					t.Fatalf("skipped %v, failed %v (%s), want the test %s", r.skipped, r.failed, r.msg,
						map[bool]string{true: "failed", false: "skipped"}[require])
				}
				t.Logf("%s: %s", map[bool]string{true: "failed", false: "skipped"}[require], r.msg)
			})
		}
	}
	ctx := context.Background()
	if _, err := integration.StartPgBouncer(ctx, integration.PgBouncerOptions{Upstream: "127.0.0.1:1"}); err == nil {
		t.Error("StartPgBouncer without the program succeeded")
	}
	if _, err := integration.StartHAProxy(ctx, integration.HAProxyOptions{Backends: []string{"127.0.0.1:1"}}); err == nil {
		t.Error("StartHAProxy without the program succeeded")
	}
}

// TestPgBouncerReportsItsPoolsParameters: PgBouncer answers a client's
// start-up with the parameters of the first server connection of its
// pool, so in_hot_standby need not be that of the server the client's
// session runs on. Behind an endpoint over the primary and a replica,
// PgBouncer in session mode gives six clients at once server connections
// on both servers, and reports one value of in_hot_standby to them all.
func TestPgBouncerReportsItsPoolsParameters(t *testing.T) {
	cluster.Need(t)
	ctx := testCtx(t)
	if v, err := cluster.QueryString(ctx, 0, "SELECT current_setting('server_version_num')::int >= 140000"); err != nil {
		t.Fatal(err)
	} else if v != "t" {
		t.Skip("PostgreSQL reports in_hot_standby from 14 on")
	}
	h := cluster.ReaderEndpoint(t, cluster.Primary(), 1)
	b := integration.NewPgBouncer(t, integration.PgBouncerOptions{Upstream: h.Addr(), Mode: integration.PoolSession})
	reported := map[string]bool{}
	wrong, recoveries := 0, map[bool]bool{}
	for k := range 6 {
		c := connectVia(t, ctx, b.DSN(), "exec") // open until the test ends
		var recovery bool
		if err := c.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&recovery); err != nil {
			t.Fatal(err)
		}
		standby := c.PgConn().ParameterStatus("in_hot_standby")
		t.Logf("client %d: in_hot_standby %q reported, pg_is_in_recovery() %v", k, standby, recovery)
		reported[standby], recoveries[recovery] = true, true
		if (standby == "on") != recovery {
			wrong++
		}
	}
	if len(recoveries) != 2 {
		t.Fatalf("the clients' sessions did not reach both servers: pg_is_in_recovery() was %v", recoveries)
	}
	if len(reported) != 1 || wrong == 0 {
		t.Fatalf("in_hot_standby reported %v, %d of 6 sessions on a server that disagrees: want one value for all, wrong for some", reported, wrong)
	}
}
