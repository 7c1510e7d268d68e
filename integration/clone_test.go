package integration

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestCloneByCopyUnderWrites clones two replicas with the online file copy
// (the path taken where there is no pg_basebackup, forced here so that it
// runs with any binaries) while the primary takes writes, and checks that
// they stream, replay everything and are the same cluster as the primary.
func TestCloneByCopyUnderWrites(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s, err := newLocalServers(ctx, Options{Logf: t.Logf})
	if errors.Is(err, ErrNoPostgres) && !required() {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	cloneByCopy = true
	defer func() { cloneByCopy = false }()
	c := &Cluster{srv: s, logf: t.Logf}
	defer c.Close()
	for i := range 3 {
		port, err := reservePort()
		if err != nil {
			t.Fatal(err)
		}
		c.nodes = append(c.nodes, &node{index: i, name: "replica" + strconv.Itoa(i), port: port, upstream: -1})
	}
	primary := c.nodes[0]
	if err := s.createPrimary(ctx, primary, serverConf(s.major(), 2), hbaConf); err != nil {
		t.Fatal(c.withLogs(err, 0))
	}
	c.setState(primary, true, false, -1)
	// Enough data that the copy takes a while, rewritten while it runs.
	if err := c.Exec(ctx, 0, "CREATE TABLE w (id int PRIMARY KEY, n int NOT NULL); "+
		"INSERT INTO w SELECT g, 0 FROM generate_series(1, 100000) g"); err != nil {
		t.Fatal(err)
	}

	stop := make(chan struct{})
	var writes int
	var werr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		conn, err := c.connect(ctx, 0)
		if err != nil {
			werr = err
			return
		}
		defer conn.Close(context.Background())
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := conn.Exec(ctx, "UPDATE w SET n = n + 1 WHERE id % 50 = $1", writes%50); err != nil {
				werr = err
				return
			}
			writes++
		}
	}()

	errs := make([]error, 3)
	var cwg sync.WaitGroup
	for _, n := range c.nodes[1:] {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			if errs[n.index] = s.createReplica(ctx, n, primary, conninfo(s, n, primary)); errs[n.index] == nil {
				c.setState(n, true, true, 0)
			}
		}()
	}
	cwg.Wait()
	close(stop)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(c.withLogs(err, -1))
	}
	if werr != nil {
		t.Fatal(werr)
	}
	t.Logf("%d updates while cloning", writes)
	if err := c.WaitStreaming(ctx); err != nil {
		t.Fatal(c.withLogs(err, -1))
	}
	if err := c.WaitCaughtUp(ctx); err != nil {
		t.Fatal(c.withLogs(err, -1))
	}
	const sum = "SELECT sum(n)::text || ' ' || count(*)::text || ' ' || " +
		"(SELECT system_identifier FROM pg_control_system())::text FROM w"
	want, err := c.QueryString(ctx, 0, sum)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 3; i++ {
		got, err := c.QueryString(ctx, i, sum)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("node %d: sum, count, system identifier = %s, primary %s", i, got, want)
		}
		if rec, err := c.QueryString(ctx, i, "SELECT pg_is_in_recovery()"); err != nil || rec != "t" {
			t.Errorf("node %d: pg_is_in_recovery() = %q, %v", i, rec, err)
		}
	}
	// The temporary slots went with the clone sessions.
	if slots, err := c.QueryString(ctx, 0, "SELECT count(*) FROM pg_replication_slots"); err != nil || slots != "0" {
		t.Errorf("replication slots left on the primary: %q, %v", slots, err)
	}
}
