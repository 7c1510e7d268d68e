package drivertest

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration"
)

// Host names as users write them: a name with several addresses gives a
// server per address (pgreplica's resolve.go). The resolver is the
// connector's LookupFunc, so the tests do not depend on this machine's
// /etc/hosts (Debian, Ubuntu and macOS list localhost as 127.0.0.1 and ::1).

// namesDB opens a pgreplica handle on hosts (host:port, comma-separated)
// whose names lookup resolves.
func namesDB(t *testing.T, inner, hosts string, lookup pgreplica.LookupFunc) (*sql.DB, *pgreplica.Connector) {
	t.Helper()
	cfg, err := pgreplica.ParseDSN(fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable&application_name=%s&pgreplica_driver=%s",
		hosts, appName(t), inner))
	if err != nil {
		t.Fatal(err)
	}
	cfg.LookupFunc = lookup
	c, err := pgreplica.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	t.Cleanup(func() { db.Close() })
	if err := db.PingContext(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	return db, c
}

// roles counts the nodes of c by what they do: the primary, the replicas
// that take reads, and the others (aliases, unreachable addresses).
func roles(c *pgreplica.Connector) (primaries, readers int, others []string) {
	for _, s := range c.Nodes() {
		switch {
		case s.Err == nil && strings.HasPrefix(s.Why, "primary:"):
			primaries++
		case s.Reads:
			readers++
		default:
			others = append(others, s.Addr+": "+s.Why)
		}
	}
	return primaries, readers, others
}

// writeThenRead writes a row and reads it back with a session and again
// without one until a read ran on a replica: read-your-writes, and the
// replicas take reads.
func writeThenRead(t *testing.T, db *sql.DB, c *integration.Cluster) {
	t.Helper()
	ctx := ctxFor(t)
	tbl := strings.ToLower(appName(t))
	if _, err := db.ExecContext(ctx, fmt.Sprintf("DROP TABLE IF EXISTS %s; CREATE TABLE %s (v text)", tbl, tbl)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Exec(context.Background(), c.Primary(), "DROP TABLE IF EXISTS "+tbl) })
	sess := pgreplica.NewSession()
	sctx := pgreplica.WithSession(ctx, sess)
	if _, err := db.ExecContext(sctx, "INSERT INTO "+tbl+" VALUES ('written')"); err != nil {
		t.Fatal(err)
	}
	var v string
	if err := db.QueryRowContext(sctx, "SELECT v FROM "+tbl).Scan(&v); err != nil || v != "written" {
		t.Fatalf("read back %q, %v: want the write", v, err)
	}
	if err := c.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	primary := c.Port(c.Primary())
	for i := 0; ; i++ {
		var port int
		if err := db.QueryRowContext(pgreplica.WithSession(ctx, sess), "SELECT inet_server_port() FROM "+tbl).Scan(&port); err != nil {
			t.Fatal(err)
		}
		if port != primary {
			return
		}
		if i == 20 {
			t.Fatalf("20 reads after the replicas caught up all ran on the primary")
		}
	}
}

// TestLocalhostWithBothAddresses: servers that listen on 127.0.0.1 and
// ::1, named localhost, which resolves to both: every read and write is
// served, each server counts once (the other address is its alias), and
// the replicas take reads.
func TestLocalhostWithBothAddresses(t *testing.T) {
	cluster.Need(t)
	if cluster.Runtime() != integration.RuntimeLocal {
		t.Skip("the servers' listen addresses are the local runtime's")
	}
	if ln, err := net.Listen("tcp", "[::1]:0"); err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	} else {
		ln.Close()
	}
	dual, err := integration.Start(ctxFor(t), integration.Options{Replicas: 2, ExtraConf: []string{"listen_addresses = '127.0.0.1,::1'"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dual.Close() })
	hosts := fmt.Sprintf("localhost:%d,localhost:%d,localhost:%d", dual.Port(0), dual.Port(1), dual.Port(2))
	stock := func(_ context.Context, host string) ([]string, error) {
		if host == "localhost" {
			return []string{"127.0.0.1", "::1"}, nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	for _, inner := range drivers {
		t.Run(inner, func(t *testing.T) {
			db, c := namesDB(t, inner, hosts, stock)
			writeThenRead(t, db, dual)
			primaries, readers, others := roles(c)
			if primaries != 1 || readers != 2 || len(others) != 3 {
				t.Errorf("%d primaries, %d replicas taking reads, others %q: want 1, 2 and 3 aliases", primaries, readers, others)
			}
			for _, o := range others {
				if !strings.Contains(o, "the same server as") {
					t.Errorf("%s: want an alias", o)
				}
			}
		})
	}
}

// TestLocalhostOnIPv4Only: localhost resolves to ::1 first, where no
// server listens (the harness's servers listen on 127.0.0.1 only): those
// addresses are down, the name is not.
func TestLocalhostOnIPv4Only(t *testing.T) {
	cluster.Need(t)
	hosts := fmt.Sprintf("localhost:%d,localhost:%d,localhost:%d", cluster.Port(0), cluster.Port(1), cluster.Port(2))
	v6First := func(context.Context, string) ([]string, error) { return []string{"::1", "127.0.0.1"}, nil }
	for _, inner := range drivers {
		t.Run(inner, func(t *testing.T) {
			db, c := namesDB(t, inner, hosts, v6First)
			writeThenRead(t, db, cluster)
			primaries, readers, others := roles(c)
			if primaries != 1 || readers != 2 || len(others) != 3 {
				t.Errorf("%d primaries, %d replicas taking reads, others %q: want 1, 2 and 3 addresses down", primaries, readers, others)
			}
			for _, o := range others {
				if !strings.Contains(o, "::1") || !strings.Contains(o, "unreachable") {
					t.Errorf("%s: want the ::1 address unreachable", o)
				}
			}
		})
	}
}

// TestNameForSeveralServers: one name whose addresses are the cluster's
// servers (a headless Service, DNS round robin) gives each server with its
// own role.
func TestNameForSeveralServers(t *testing.T) {
	cluster.Need(t)
	pods := func(_ context.Context, host string) ([]string, error) {
		var addrs []string
		for i := range cluster.Len() {
			addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", cluster.Port(i)))
		}
		return addrs, nil
	}
	for _, inner := range drivers {
		t.Run(inner, func(t *testing.T) {
			db, c := namesDB(t, inner, "pods.db.svc", pods)
			writeThenRead(t, db, cluster)
			if primaries, readers, others := roles(c); primaries != 1 || readers != 2 || len(others) != 0 {
				t.Errorf("%d primaries, %d replicas taking reads, others %q: want 1, 2 and none", primaries, readers, others)
			}
		})
	}
}

// TestNameFollowsItsAnswers: a name's servers follow its answers while
// the handle runs. It first gives the primary, one replica and an
// address where nothing listens (a pod gone); the failing address has
// the name looked up again within seconds, and the new answer (the
// other replica instead) replaces that node: reads reach the new
// replica, and the gone address is no longer listed.
func TestNameFollowsItsAnswers(t *testing.T) {
	cluster.Need(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := ln.Addr().String()
	ln.Close() // nothing listens there now
	var mu sync.Mutex
	answer := []string{fmt.Sprintf("127.0.0.1:%d", cluster.Port(0)), fmt.Sprintf("127.0.0.1:%d", cluster.Port(1)), gone}
	pods := func(context.Context, string) ([]string, error) {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(answer), nil
	}
	db, c := namesDB(t, "pgx", "pods.db.svc", pods)
	if _, readers, _ := roles(c); readers != 1 {
		t.Fatalf("%d replicas take reads, want 1: %+v", readers, c.Nodes())
	}
	mu.Lock()
	answer[2] = fmt.Sprintf("127.0.0.1:%d", cluster.Port(2))
	mu.Unlock()
	ctx := ctxFor(t)
	for {
		primaries, readers, others := roles(c)
		if primaries == 1 && readers == 2 && len(others) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the new answer was not followed: %d primaries, %d readers, others %q", primaries, readers, others)
		case <-time.After(50 * time.Millisecond): // polls Nodes(); no event says a lookup ran
		}
	}
	for _, s := range c.Nodes() {
		if strings.Contains(s.Addr, gone) {
			t.Errorf("the gone address is still listed: %+v", s)
		}
	}
	seen := map[int]bool{}
	for range 20 {
		var port int
		if err := db.QueryRowContext(pgreplica.WithEventual(ctx), "SELECT inet_server_port()").Scan(&port); err != nil {
			t.Fatal(err)
		}
		seen[port] = true
	}
	if !seen[cluster.Port(2)] {
		t.Errorf("reads went to %v, never to the new replica on port %d", seen, cluster.Port(2))
	}
}
