package integration_test

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/pgreplica/pgreplica/integration"
)

// freePortPair returns a port p such that p and p+1 are free on 127.0.0.1
// right now.
func freePortPair(t *testing.T) int {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l2, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+1)))
		l.Close()
		if err == nil {
			l2.Close()
			return p
		}
	}
	t.Fatal("no two consecutive free ports")
	return 0
}

// traversableTempDir returns a new directory that every user can
// traverse (the servers run as another user when the tests run as root),
// removed when t ends.
func traversableTempDir(t *testing.T, pattern string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestKeepStartsTheKeptClusterAgain starts a cluster with Keep and a fixed
// Port, closes it, checks that its data stayed and that no server runs,
// starts it again on other ports and finds the row written the first time
// on the replica; a Start on the Dir of a running kept cluster fails
// without touching it.
func TestKeepStartsTheKeptClusterAgain(t *testing.T) {
	cluster.Need(t)
	if cluster.Runtime() != integration.RuntimeLocal {
		t.Skip("Keep needs the local runtime")
	}
	ctx := testCtx(t)
	dir := filepath.Join(traversableTempDir(t, "pgr-keep"), "dev")
	var c *integration.Cluster
	var port int
	for attempt := 1; ; attempt++ {
		port = freePortPair(t)
		var err error
		c, err = integration.Start(ctx, integration.Options{Replicas: 1, Dir: dir, Keep: true, Port: port, Logf: t.Logf})
		if err == nil {
			break
		}
		// Another process took one of the two ports after we found them
		// free (an outgoing connection may): pick two others.
		if !errors.Is(err, integration.ErrPortTaken) || attempt == 3 {
			t.Fatal(err)
		}
		t.Logf("attempt %d: %v", attempt, err)
		os.RemoveAll(dir)
	}
	defer c.Close()
	if c.Dir() != dir || c.Port(0) != port || c.Port(1) != port+1 {
		t.Fatalf("Dir %q, ports %d, %d; want %q, %d, %d", c.Dir(), c.Port(0), c.Port(1), dir, port, port+1)
	}
	if err := c.Exec(ctx, 0, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('still here')"); err != nil {
		t.Fatal(err)
	}
	if _, err := integration.Start(ctx, integration.Options{Replicas: 1, Dir: dir, Keep: true}); err == nil ||
		!strings.Contains(err.Error(), "in use") {
		t.Fatalf("Start on the Dir of a running kept cluster: %v, want an error saying it is in use", err)
	}
	if err := c.Exec(ctx, 0, "SELECT 1"); err != nil {
		t.Fatalf("the refused Start disturbed the running cluster: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "n0", "data", "PG_VERSION")); err != nil {
		t.Fatalf("Close did not keep the data: %v", err)
	}
	if conn, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
		conn.Close()
		t.Fatal("the primary still accepts connections after Close")
	}

	again, err := integration.Start(ctx, integration.Options{Replicas: 1, Dir: dir, Keep: true, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if err := again.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := again.QueryString(ctx, 1, "SELECT v FROM kept"); err != nil || got != "still here" {
		t.Fatalf("kept row on the replica: %q, %v", got, err)
	}
	if err := again.Close(); err != nil {
		t.Fatal(err)
	}
}
