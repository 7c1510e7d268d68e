//go:build linux

package patroni_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgreplica/pgreplica/integration/patroni"
)

// TestHarness starts a cluster and checks what the helpers promise: the
// members' roles, HAProxy's ports following Patroni's checks through a
// switchover, a fourth member added and removed, and nothing left once
// the cluster is closed.
func TestHarness(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	opts := patroni.Options{Logf: t.Logf}
	c, err := patroni.Start(ctx, opts)
	if err != nil {
		patroni.Need(t, err)
	}
	dir := c.Dir()
	closed := false
	defer func() {
		if !closed {
			c.Close()
		}
	}()

	h, err := c.WaitHealthy(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Replicas) != 2 || slices.Contains(h.Replicas, h.Leader) {
		t.Fatalf("leader m%d, replicas %v: want two other members", h.Leader, h.Replicas)
	}
	checkEndpoints(ctx, t, c, h.Leader)

	from, to, err := c.Switchover(ctx, -1)
	if err != nil {
		t.Fatal(err)
	}
	if from != h.Leader || to == from {
		t.Fatalf("switchover from m%d to m%d, the leader was m%d", from, to, h.Leader)
	}
	if h, err = c.WaitHealthy(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if h.Leader != to {
		t.Fatalf("after a switchover to m%d the leader is m%d\n%s", to, h.Leader, c.Describe(ctx))
	}
	if err := c.WaitHAProxy(ctx); err != nil {
		t.Fatal(err)
	}
	checkEndpoints(ctx, t, c, to)

	added, err := c.AddMember(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h, err = c.WaitHealthy(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(h.Replicas, added) {
		t.Fatalf("added m%d, replicas %v", added, h.Replicas)
	}
	up, err := c.HAProxyUp(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(up[patroni.Reader], added) {
		t.Fatalf("HAProxy's reader port does not have the added m%d: %v", added, up)
	}
	if !strings.Contains(c.DSN(), c.Addr(added)) {
		t.Fatalf("DSN %s lacks the added member %s", c.DSN(), c.Addr(added))
	}
	if err := c.RemoveMember(ctx, added); err != nil {
		t.Fatal(err)
	}
	if err := c.RemoveMember(ctx, to); err == nil {
		t.Fatalf("removing the leader m%d did not fail", to)
	}
	if h, err = c.WaitHealthy(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(h.Replicas, added) || strings.Contains(c.DSN(), c.Addr(added)) {
		t.Fatalf("removed m%d is still there: replicas %v, DSN %s", added, h.Replicas, c.DSN())
	}
	if up, err = c.HAProxyUp(ctx); err != nil {
		t.Fatal(err)
	}
	for port, ms := range up {
		if slices.Contains(ms, added) {
			t.Fatalf("HAProxy's %s port still has the removed m%d", port, added)
		}
	}

	closed = true
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) && os.Getenv(patroni.KeepEnv) == "" {
		t.Errorf("%s is still there after Close (%v)", dir, err)
	}
	if left := processesIn(dir); len(left) > 0 {
		t.Errorf("processes left after Close: %v", left)
	}
}

// checkEndpoints checks that HAProxy's writer port reaches the leader and
// its reader ports the other members.
func checkEndpoints(ctx context.Context, t *testing.T, c *patroni.Cluster, leader int) {
	t.Helper()
	served := func(port string) (int, bool) {
		conn, err := pgx.Connect(ctx, "postgres://postgres@"+c.HAProxyAddr(port)+"/postgres?sslmode=disable")
		if err != nil {
			t.Fatalf("through HAProxy's %s port: %v\n%s", port, err, c.HAProxyLog(10))
		}
		defer conn.Close(ctx)
		var p int
		var recovery bool
		if err := conn.QueryRow(ctx, "SELECT inet_server_port(), pg_is_in_recovery()").Scan(&p, &recovery); err != nil {
			t.Fatalf("through HAProxy's %s port: %v", port, err)
		}
		return c.NodeAt(p), recovery
	}
	if m, recovery := served(patroni.Writer); m != leader || recovery {
		t.Errorf("HAProxy's writer port reached m%d (in recovery: %v), the leader is m%d", m, recovery, leader)
	}
	for _, port := range []string{patroni.Reader, patroni.ReaderLag} {
		seen := map[int]bool{}
		for range 4 {
			m, recovery := served(port)
			if m == leader || !recovery {
				t.Errorf("HAProxy's %s port reached m%d (in recovery: %v), the leader is m%d", port, m, recovery, leader)
			}
			seen[m] = true
		}
		if len(seen) != 2 {
			t.Errorf("HAProxy's %s port reached %v over four connections: want both replicas in turn", port, seen)
		}
	}
}

// processesIn lists the processes whose current directory is under dir.
func processesIn(dir string) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if err == nil && (cwd == dir || strings.HasPrefix(cwd, dir+"/")) {
			cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			out = append(out, fmt.Sprintf("%s %s", e.Name(), strings.ReplaceAll(string(cmd), "\x00", " ")))
		}
	}
	return out
}
