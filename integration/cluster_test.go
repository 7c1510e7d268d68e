package integration_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgreplica/pgreplica/integration"
)

// cluster is the 1 primary + 2 replicas shared by the tests of this package.
var cluster *integration.Cluster

func TestMain(m *testing.M) {
	os.Exit(integration.Main(m, integration.Options{}, &cluster))
}

// timeout bounds every test's waits.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

var tableSeq atomic.Int64

// newTable creates a fresh table on the primary of c and returns its name.
func newTable(t *testing.T, ctx context.Context, c *integration.Cluster) string {
	t.Helper()
	name := fmt.Sprintf("t%d_%d", os.Getpid(), tableSeq.Add(1))
	mustExec(t, ctx, c, c.Primary(), "CREATE TABLE "+name+" (id int PRIMARY KEY, v text)")
	return name
}

func mustExec(t *testing.T, ctx context.Context, c *integration.Cluster, i int, sql string, args ...any) {
	t.Helper()
	if err := c.Exec(ctx, i, sql, args...); err != nil {
		t.Fatal(err)
	}
}

// rowCount returns how many rows of table have id on node i.
func rowCount(t *testing.T, ctx context.Context, c *integration.Cluster, i int, table string, id int) string {
	t.Helper()
	s, err := c.QueryString(ctx, i, "SELECT count(*) FROM "+table+" WHERE id = $1", id)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func waitCaughtUp(t *testing.T, ctx context.Context, c *integration.Cluster) {
	t.Helper()
	if err := c.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestTopology(t *testing.T) {
	cluster.Need(t)
	ctx := testCtx(t)
	if got := cluster.Len(); got != 3 {
		t.Fatalf("Len() = %d, want 3", got)
	}
	if got := cluster.Primary(); got != 0 {
		t.Fatalf("Primary() = %d, want 0", got)
	}
	var hosts []string
	for i := range cluster.Len() {
		p := cluster.Port(i)
		if p == 5432 || p <= 0 {
			t.Fatalf("Port(%d) = %d", i, p)
		}
		hosts = append(hosts, fmt.Sprintf("127.0.0.1:%d", p))
		if want := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p); cluster.NodeDSN(i) != want {
			t.Fatalf("NodeDSN(%d) = %q, want %q", i, cluster.NodeDSN(i), want)
		}
		want := "f"
		if i > 0 {
			want = "t"
		}
		if got, err := cluster.QueryString(ctx, i, "SELECT pg_is_in_recovery()"); err != nil || got != want {
			t.Fatalf("node %d: pg_is_in_recovery() = %q, %v; want %q", i, got, err, want)
		}
	}
	if want := "postgres://postgres@" + strings.Join(hosts, ",") + "/postgres?sslmode=disable"; cluster.DSN() != want {
		t.Fatalf("DSN() = %q, want %q", cluster.DSN(), want)
	}

	// The multi-host DSN is usable as is; asking for a standby reaches one.
	conn, err := pgx.Connect(ctx, cluster.DSN()+"&target_session_attrs=standby")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var inRecovery bool
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil || !inRecovery {
		t.Fatalf("standby via DSN: in recovery = %v, %v", inRecovery, err)
	}

	// Replicas carry the application names the docs promise.
	got, err := cluster.QueryString(ctx, 0, "SELECT string_agg(application_name || '=' || state, ',' ORDER BY application_name) FROM pg_stat_replication")
	if err != nil || got != "replica1=streaming,replica2=streaming" {
		t.Fatalf("pg_stat_replication: %q, %v", got, err)
	}
}

func TestReplication(t *testing.T) {
	cluster.Need(t)
	ctx := testCtx(t)
	table := newTable(t, ctx, cluster)
	mustExec(t, ctx, cluster, 0, "INSERT INTO "+table+" VALUES ($1, $2)", 1, "hello")
	waitCaughtUp(t, ctx, cluster)
	for i := 1; i < cluster.Len(); i++ {
		got, err := cluster.QueryString(ctx, i, "SELECT v FROM "+table+" WHERE id = 1")
		if err != nil || got != "hello" {
			t.Fatalf("replica %d: %q, %v", i, got, err)
		}
	}
	// Replicas are read-only.
	if err := cluster.Exec(ctx, 1, "INSERT INTO "+table+" VALUES (2, 'x')"); err == nil {
		t.Fatal("write on a replica succeeded")
	}
}

func TestQueryString(t *testing.T) {
	cluster.Need(t)
	ctx := testCtx(t)
	for sql, want := range map[string]string{
		"SELECT 42":                          "42",
		"SELECT true":                        "t",
		"SELECT NULL::text":                  "",
		"SELECT '0/10'::pg_lsn":              "0/10",
		"SELECT current_user":                "postgres",
		"SELECT 1 UNION SELECT 2 ORDER BY 1": "1",
	} {
		if got, err := cluster.QueryString(ctx, 0, sql); err != nil || got != want {
			t.Errorf("%s = %q, %v; want %q", sql, got, err, want)
		}
	}
	if _, err := cluster.QueryString(ctx, 0, "SELECT 1 WHERE false"); !errors.Is(err, pgx.ErrNoRows) {
		t.Errorf("no rows: err = %v, want pgx.ErrNoRows", err)
	}
	if got, err := cluster.QueryString(ctx, 0, "SELECT $1::int + $2", 40, 2); err != nil || got != "42" {
		t.Errorf("with args: %q, %v", got, err)
	}
	// Several statements in one Exec without arguments.
	mustExec(t, ctx, cluster, 0, "SELECT 1; SELECT 2")
}

func TestPauseReplay(t *testing.T) {
	cluster.Need(t)
	ctx := testCtx(t)
	table := newTable(t, ctx, cluster)
	waitCaughtUp(t, ctx, cluster)

	if err := cluster.PauseReplay(ctx, 1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.ResumeReplay(context.Background(), 1) })
	if got, err := cluster.QueryString(ctx, 1, "SELECT pg_is_wal_replay_paused()"); err != nil || got != "t" {
		t.Fatalf("pg_is_wal_replay_paused() = %q, %v", got, err)
	}
	mustExec(t, ctx, cluster, 0, "INSERT INTO "+table+" VALUES (1, 'paused')")
	waitCaughtUp(t, ctx, cluster) // skips the paused replica
	if got := rowCount(t, ctx, cluster, 2, table, 1); got != "1" {
		t.Fatalf("replica 2 does not see the row: count = %s", got)
	}
	if got := rowCount(t, ctx, cluster, 1, table, 1); got != "0" {
		t.Fatalf("paused replica 1 sees the row: count = %s", got)
	}

	if err := cluster.ResumeReplay(ctx, 1); err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, ctx, cluster)
	if got := rowCount(t, ctx, cluster, 1, table, 1); got != "1" {
		t.Fatalf("resumed replica 1 does not see the row: count = %s", got)
	}
}

func TestPauseReplicas(t *testing.T) {
	cluster.Need(t)
	ctx := testCtx(t)
	table := newTable(t, ctx, cluster)
	waitCaughtUp(t, ctx, cluster)

	resume := cluster.PauseReplicas(t)
	mustExec(t, ctx, cluster, 0, "INSERT INTO "+table+" VALUES (1, 'paused')")
	for i := 1; i < cluster.Len(); i++ {
		if got := rowCount(t, ctx, cluster, i, table, 1); got != "0" {
			t.Fatalf("paused replica %d sees the row: count = %s", i, got)
		}
	}
	resume()
	resume() // harmless
	waitCaughtUp(t, ctx, cluster)
	for i := 1; i < cluster.Len(); i++ {
		if got := rowCount(t, ctx, cluster, i, table, 1); got != "1" {
			t.Fatalf("resumed replica %d does not see the row: count = %s", i, got)
		}
	}
}

func TestNodeAt(t *testing.T) {
	cluster.Need(t)
	ctx := testCtx(t)
	for i := range cluster.Len() {
		port, err := cluster.QueryString(ctx, i, "SELECT inet_server_port()")
		if err != nil {
			t.Fatal(err)
		}
		p, _ := strconv.Atoi(port)
		if got := cluster.NodeAt(p); got != i {
			t.Errorf("NodeAt(inet_server_port() of node %d = %d) = %d", i, p, got)
		}
	}
	if got := cluster.NodeAt(1); got != -1 {
		t.Errorf("NodeAt(1) = %d, want -1", got)
	}
}

func TestApplyDelay(t *testing.T) {
	cluster.Need(t)
	ctx := testCtx(t)
	table := newTable(t, ctx, cluster)
	waitCaughtUp(t, ctx, cluster)

	const delay = time.Second
	if err := cluster.SetApplyDelay(ctx, 2, delay); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.SetApplyDelay(context.Background(), 2, 0) })
	if got, err := cluster.QueryString(ctx, 2, "SHOW recovery_min_apply_delay"); err != nil || got != "1s" {
		t.Fatalf("SHOW recovery_min_apply_delay = %q, %v", got, err)
	}

	committed := time.Now()
	mustExec(t, ctx, cluster, 0, "INSERT INTO "+table+" VALUES (1, 'delayed')")
	got := rowCount(t, ctx, cluster, 2, table, 1)
	if elapsed := time.Since(committed); elapsed < delay/2 && got != "0" {
		t.Fatalf("delayed replica 2 sees the row after %v", elapsed)
	}
	waitCaughtUp(t, ctx, cluster)
	if elapsed := time.Since(committed); elapsed < delay-50*time.Millisecond {
		t.Fatalf("replica 2 caught up after %v, before its %v apply delay", elapsed, delay)
	}
	for i := 1; i <= 2; i++ {
		if got := rowCount(t, ctx, cluster, i, table, 1); got != "1" {
			t.Fatalf("replica %d does not see the row after catching up", i)
		}
	}

	if err := cluster.SetApplyDelay(ctx, 2, 0); err != nil {
		t.Fatal(err)
	}
	if got, err := cluster.QueryString(ctx, 2, "SHOW recovery_min_apply_delay"); err != nil || got != "0" {
		t.Fatalf("SHOW recovery_min_apply_delay = %q, %v", got, err)
	}
}

func TestKillAndStart(t *testing.T) {
	cluster.Need(t)
	ctx := testCtx(t)
	table := newTable(t, ctx, cluster)

	if err := cluster.Kill(2); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.QueryString(ctx, 2, "SELECT 1"); err == nil {
		t.Fatal("killed node 2 still answers")
	}
	mustExec(t, ctx, cluster, 0, "INSERT INTO "+table+" VALUES (1, 'while down')")
	waitCaughtUp(t, ctx, cluster) // ignores the stopped node
	if err := cluster.Start(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitStreaming(ctx); err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, ctx, cluster)
	if got := rowCount(t, ctx, cluster, 2, table, 1); got != "1" {
		t.Fatal("restarted replica 2 does not see the row written while it was down")
	}

	// A clean stop and start works too, and Stop is idempotent.
	if err := cluster.Stop(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Stop(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Start(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitStreaming(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestKillPrimary(t *testing.T) {
	cluster.Need(t)
	ctx := testCtx(t)
	table := newTable(t, ctx, cluster)
	mustExec(t, ctx, cluster, 0, "INSERT INTO "+table+" VALUES (1, 'before crash')")
	if err := cluster.Kill(0); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Start(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if got := rowCount(t, ctx, cluster, 0, table, 1); got != "1" {
		t.Fatal("committed row lost in crash recovery")
	}
	if err := cluster.WaitStreaming(ctx); err != nil {
		t.Fatal(err)
	}
	mustExec(t, ctx, cluster, 0, "INSERT INTO "+table+" VALUES (2, 'after crash')")
	waitCaughtUp(t, ctx, cluster)
	for i := 1; i <= 2; i++ {
		if got := rowCount(t, ctx, cluster, i, table, 2); got != "1" {
			t.Fatalf("replica %d misses the row written after the primary restarted", i)
		}
	}
}

// TestPromoteAndRepoint runs a failover on a cluster of its own: stop the
// primary, promote replica 1, make replica 2 and then the old primary
// follow it.
func TestPromoteAndRepoint(t *testing.T) {
	cluster.Need(t)
	ctx := testCtx(t)
	began := time.Now()
	c, err := integration.Start(ctx, integration.Options{Replicas: 2, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("second 1+2 cluster streaming after %v", time.Since(began))
	defer c.Close()

	table := newTable(t, ctx, c)
	mustExec(t, ctx, c, 0, "INSERT INTO "+table+" VALUES (1, 'on the old primary')")
	waitCaughtUp(t, ctx, c)

	if err := c.Stop(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Promote(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if got, err := c.QueryString(ctx, 1, "SELECT pg_is_in_recovery()"); err != nil || got != "f" {
		t.Fatalf("promoted node 1: pg_is_in_recovery() = %q, %v", got, err)
	}
	if c.Primary() != 1 {
		t.Fatalf("Primary() = %d after promoting node 1", c.Primary())
	}
	if err := c.Promote(ctx, 1); err == nil {
		t.Fatal("promoting the primary again succeeded")
	}

	if err := c.Repoint(ctx, 2, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitStreaming(ctx); err != nil {
		t.Fatal(err)
	}
	mustExec(t, ctx, c, 1, "INSERT INTO "+table+" VALUES (2, 'on the new primary')")
	waitCaughtUp(t, ctx, c)
	if got := rowCount(t, ctx, c, 2, table, 2); got != "1" {
		t.Fatal("replica 2 does not see the new primary's write")
	}

	// The old primary was stopped cleanly before the promotion, so it can
	// rejoin as a replica of the new one.
	if err := c.Repoint(ctx, 0, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitStreaming(ctx); err != nil {
		t.Fatal(err)
	}
	mustExec(t, ctx, c, 1, "INSERT INTO "+table+" VALUES (3, 'after rejoin')")
	waitCaughtUp(t, ctx, c)
	for _, i := range []int{0, 2} {
		if got := rowCount(t, ctx, c, i, table, 3); got != "1" {
			t.Fatalf("node %d does not see the write made after the rejoin", i)
		}
	}
	if got, err := c.QueryString(ctx, 1, "SELECT string_agg(application_name, ',' ORDER BY application_name) FROM pg_stat_replication"); err != nil || got != "replica0,replica2" {
		t.Fatalf("new primary's replicas: %q, %v", got, err)
	}

	port := c.Port(1)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
		conn.Close()
		t.Fatalf("port %d still accepts connections after Close", port)
	}
	if err := c.Exec(ctx, 1, "SELECT 1"); err == nil {
		t.Fatal("Exec after Close succeeded")
	}
}

func TestLonePrimary(t *testing.T) {
	cluster.Need(t)
	ctx := testCtx(t)
	c, err := integration.Start(ctx, integration.Options{Replicas: -1, ExtraConf: []string{"work_mem = '7MB'"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Len() != 1 {
		t.Fatalf("Len() = %d, want 1", c.Len())
	}
	if err := c.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	// ExtraConf reaches postgresql.conf.
	if got, err := c.QueryString(ctx, 0, "SHOW work_mem"); err != nil || got != "7MB" {
		t.Fatalf("ExtraConf not applied: %q, %v", got, err)
	}
	// Close copes with a node that was killed and never started again.
	if err := c.Kill(0); err != nil {
		t.Fatal(err)
	}
	if err := c.Kill(0); err != nil {
		t.Fatalf("second Kill: %v", err)
	}
	began := time.Now()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Close after Kill took %v", time.Since(began))
}

func TestNoPostgres(t *testing.T) {
	_, err := integration.Start(context.Background(), integration.Options{BinDir: t.TempDir()})
	if !errors.Is(err, integration.ErrNoPostgres) {
		t.Fatalf("err = %v, want ErrNoPostgres", err)
	}
	for _, want := range []string{"apt-get install postgresql", "Docker engine"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestNeedOnNil(t *testing.T) {
	if os.Getenv(integration.RequireEnv) == "require" {
		t.Skip("Need fails instead of skipping under " + integration.RequireEnv + "=require")
	}
	var none *integration.Cluster
	var skipped bool
	t.Run("nil", func(t *testing.T) {
		defer func() { skipped = t.Skipped() }()
		none.Need(t)
		t.Error("Need on a nil cluster did not skip")
	})
	if !skipped {
		t.Fatal("subtest was not skipped")
	}
	if err := none.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestStartFailureCleansUp(t *testing.T) {
	cluster.Need(t)
	ctx := testCtx(t)
	parent := traversableTempDir(t, "pgr-test")
	_, err := integration.Start(ctx, integration.Options{
		Dir:       parent,
		ExtraConf: []string{"shared_buffers = 'plenty'"},
	})
	if err == nil {
		t.Fatal("Start with a bad setting succeeded")
	}
	t.Logf("Start failed as it should: %v", err)
	// The error quotes the server log, which names the bad setting.
	if !strings.Contains(err.Error(), "shared_buffers") || !strings.Contains(err.Error(), "--- end of") {
		t.Fatalf("error does not quote the server log: %v", err)
	}
	if left, _ := os.ReadDir(parent); len(left) != 0 {
		t.Fatalf("Start left %v behind in %s", left, parent)
	}
}

func TestUnreachableDir(t *testing.T) {
	cluster.Need(t)
	if os.Geteuid() != 0 || cluster.Runtime() != integration.RuntimeLocal {
		t.Skip("only local servers started by root run as another user")
	}
	_, err := integration.Start(testCtx(t), integration.Options{Dir: t.TempDir()}) // mode 0700
	if err == nil || !strings.Contains(err.Error(), "cannot enter") {
		t.Fatalf("err = %v, want one saying the server user cannot enter the directory", err)
	}
}
