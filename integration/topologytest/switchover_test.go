package topologytest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration"
)

// TestSwitchoverWritesWait runs a switchover as failover managers do:
// the primary (node 0) is demoted first (it comes back in recovery,
// following node 1), and node 1 is promoted a moment later. In between
// every node is in recovery and the cluster has no primary.
//
// Required: a write sent in that window with time left in its context
// waits for the new primary and commits there (it failed at once with
// "every reachable host is in recovery" before); one whose deadline comes
// first fails with ErrNoPrimary, saying how long it waited for a
// primary; neither reaches node 0.
func TestSwitchoverWritesWait(t *testing.T) {
	c := startCluster(t, integration.Options{})
	db, cn := open(t, c)
	ctx := testCtx(t, 2*time.Minute)
	tbl := newTable(t, c)
	if _, err := db.ExecContext(ctx, "INSERT INTO "+tbl+" (seq) VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}

	if err := c.Demote(ctx, 0, 1); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := within(ctx, 10*time.Second)
	defer cancel()
	if err := waitFor(wctx, "the connector to see node 0 in recovery", func() (bool, string) {
		ns := status(t, cn, c, 0)
		return ns.Err == nil && ns.Role == pgreplica.RoleReplica, describe(ns)
	}); err != nil {
		t.Fatal(err)
	}

	// The window: no primary. A write with a short deadline, and one
	// with time to wait.
	shortCtx, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	_, shortErr := db.ExecContext(shortCtx, "INSERT INTO "+tbl+" (seq) VALUES (2)")
	waited := make(chan error, 1)
	sent := time.Now()
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_, err := db.ExecContext(wctx, "INSERT INTO "+tbl+" (seq) VALUES (3)")
		waited <- err
	}()
	select {
	case err := <-waited:
		t.Fatalf("a write sent while no server was the primary returned before any was promoted: %v", err)
	case <-time.After(500 * time.Millisecond):
	}

	if err := c.Promote(ctx, 1); err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()
	select {
	case err := <-waited:
		if err != nil {
			t.Errorf("the write that waited for the new primary failed: %v", err)
		}
		t.Logf("the write sent in the window returned %v after it was sent, %v after Promote returned",
			time.Since(sent).Round(time.Millisecond), time.Since(promoted).Round(time.Millisecond))
	case <-time.After(15 * time.Second):
		t.Fatal("the write sent in the window has not returned 15 s after the promotion")
	}

	switch {
	case shortErr == nil:
		t.Error("a write whose deadline passed with no primary succeeded")
	case !errors.Is(shortErr, pgreplica.ErrNoPrimary):
		t.Errorf("the write whose deadline passed with no primary: %v, want ErrNoPrimary", shortErr)
	case !strings.Contains(shortErr.Error(), "waited") || !errors.Is(shortErr, context.DeadlineExceeded):
		t.Errorf("the write whose deadline passed does not say how long it waited, or does not wrap the context's error: %v", shortErr)
	default:
		t.Logf("the write whose deadline passed: %v", shortErr)
	}

	seqs := func(i int) string {
		s, err := c.QueryString(ctx, i, "SELECT coalesce(string_agg(seq::text, ',' ORDER BY seq), '') FROM "+tbl)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if got := seqs(1); got != "1,3" {
		t.Errorf("rows on the new primary: %q, want \"1,3\"", got)
	}
	if err := c.WaitStreaming(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	if got := seqs(0); got != "1,3" {
		t.Errorf("rows on node 0, now a replica of node 1: %q, want \"1,3\" (%s)", got, fmt.Sprint(describe(status(t, cn, c, 0))))
	}
}

// TestPromotedReplicaKeepsItsConnections: the connections a replica's
// pool holds when the replica is promoted reach the new primary itself,
// so the first write after the promotion runs on one of them, without
// waiting for a new connection (which, on a loaded machine, cost writes
// after Patroni's promotions 150–250 ms).
func TestPromotedReplicaKeepsItsConnections(t *testing.T) {
	c := startCluster(t, integration.Options{})
	db, cn := open(t, c)
	ctx := testCtx(t, 2*time.Minute)
	tbl := newTable(t, c)
	if err := c.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	// Connections to node 1, made while it is a replica.
	before := map[int]bool{}
	for range 100 {
		var pid, port int
		if err := db.QueryRowContext(ctx, "SELECT pg_backend_pid(), inet_server_port()").Scan(&pid, &port); err != nil {
			t.Fatal(err)
		}
		if c.NodeAt(port) == 1 {
			before[pid] = true
		}
	}
	if len(before) == 0 {
		t.Fatal("no read ran on node 1")
	}

	if err := c.Demote(ctx, 0, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.Promote(ctx, 1); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := within(ctx, 10*time.Second)
	defer cancel()
	if err := waitFor(wctx, "the connector to see node 1 as the primary", func() (bool, string) {
		ns := status(t, cn, c, 1)
		return ns.Err == nil && ns.Role == pgreplica.RolePrimary, describe(ns)
	}); err != nil {
		t.Fatal(err)
	}
	var pid int
	if err := db.QueryRowContext(ctx, "INSERT INTO "+tbl+" (seq) VALUES (1) RETURNING pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if !before[pid] {
		t.Errorf("the first write after node 1's promotion ran on backend %d, a new connection; node 1's pool held %v, made while it was a replica",
			pid, slices.Sorted(maps.Keys(before)))
	}
}
