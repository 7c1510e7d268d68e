package drivertest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
)

// TestPrimaryShowsWhatAReplicaShowed: a replica can show a commit the
// primary does not show yet. The primary makes a commit visible when the
// transaction leaves its process array, after its commit record went to
// the replicas and after its synchronous standby answered. Here the
// window is held open: replica 1 is the synchronous standby with its
// replay paused, and a writer commits with synchronous_commit =
// remote_apply, so its COMMIT waits while replica 2 (asynchronous)
// already shows the row. A session that read the new value on replica 2
// and then reads on the primary must not see the old value: the read
// waits until the primary shows the commit (PrimaryVisibilityWaits), which
// it does once replica 1 resumes. Without that wait the primary answered
// the old value at once.
func TestPrimaryShowsWhatAReplicaShowed(t *testing.T) {
	for _, inner := range []string{"pgx", "pq"} {
		t.Run(inner, func(t *testing.T) { testPrimaryShows(t, open(t, inner), nil) })
	}
	// Behind a reader endpoint over both replicas: the session's read
	// finds the replica that has its position among the connections of
	// the one address, and the primary's check asks that very server.
	ep := cluster.ReaderEndpoint(t)
	for _, inner := range []string{"pgx", "pq"} {
		t.Run("endpoint/"+inner, func(t *testing.T) {
			db, _ := openShape(t, inner, []string{primaryAddr(), ep.Addr()})
			holdReads(t, db, 4)
			testPrimaryShows(t, db, nil)
		})
	}
	// Behind the endpoint, with every connection to the replica the
	// session read on busy with other reads: the check waits for one
	// (counted as a visibility wait) instead of taking the replica for
	// gone, which let the primary answer the old value.
	for _, inner := range []string{"pgx", "pq"} {
		t.Run("endpoint-busy/"+inner, func(t *testing.T) {
			const conns = 4
			db, _ := openShape(t, inner, []string{primaryAddr(), ep.Addr()},
				fmt.Sprintf("pgreplica_max_conns_per_host=%d", conns), "pgreplica_connect_timeout=1s")
			holdReads(t, db, conns)
			testPrimaryShows(t, db, func(node int) func() { return holdServer(t, db, node, conns) })
		})
	}
}

// holdServer borrows every connection of db's endpoint (conns of them)
// with a read-only transaction, ends those that reached another node
// than node, and returns what ends the rest.
func holdServer(t *testing.T, db *sql.DB, node, conns int) func() {
	t.Helper()
	ctx := pgreplica.WithEventual(ctxFor(t))
	var held, others []*sql.Tx
	for range conns {
		tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		var port int
		if err := tx.QueryRowContext(ctx, "SELECT inet_server_port()").Scan(&port); err != nil {
			t.Fatal(err)
		}
		if nodeOf(t, port) == node {
			held = append(held, tx)
		} else {
			others = append(others, tx)
		}
	}
	for _, tx := range others {
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if len(held) == 0 {
		t.Fatalf("none of the endpoint's %d connections reached node %d", conns, node)
	}
	return func() {
		for _, tx := range held {
			if err := tx.Commit(); err != nil {
				t.Error(err)
			}
		}
	}
}

// testPrimaryShows runs the scene; hold, when given, makes every
// connection to a node busy between the session's replica read and its
// primary read, and returns what frees them.
func testPrimaryShows(t *testing.T, db *sql.DB, hold func(node int) func()) {
	ctx := ctxFor(t)
	const sync, async = 1, 2
	p := cluster.Primary()
	if p != 0 {
		t.Skipf("node %d is the primary: the test names replica1 as the synchronous standby", p)
	}
	mustExec(t, p, "DROP TABLE IF EXISTS visibility")
	mustExec(t, p, "CREATE TABLE visibility (id int PRIMARY KEY, v int NOT NULL)")
	mustExec(t, p, "INSERT INTO visibility VALUES (1, 1)")
	if err := cluster.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Exec(ctx, p, "ALTER SYSTEM SET synchronous_standby_names = 'replica1'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cluster.Exec(context.Background(), p, "ALTER SYSTEM RESET synchronous_standby_names")
		cluster.Exec(context.Background(), p, "SELECT pg_reload_conf()")
	})
	if err := cluster.Exec(ctx, p, "SELECT pg_reload_conf()"); err != nil {
		t.Fatal(err)
	}
	awaitValue(t, ctx, p, "SELECT coalesce((SELECT sync_state FROM pg_stat_replication WHERE application_name = 'replica1'), '')", "sync")
	if err := cluster.PauseReplay(ctx, sync); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			if err := cluster.ResumeReplay(context.Background(), sync); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(resume)

	writer, err := sql.Open("pgx", cluster.NodeDSN(p))
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	committed := make(chan error, 1)
	go func() {
		tx, err := writer.BeginTx(ctx, nil)
		if err == nil {
			_, err = tx.ExecContext(ctx, "SET LOCAL synchronous_commit = remote_apply")
		}
		if err == nil {
			_, err = tx.ExecContext(ctx, "UPDATE visibility SET v = 2 WHERE id = 1")
		}
		if err == nil {
			err = tx.Commit()
		}
		committed <- err
	}()
	// The asynchronous replica shows the commit while the primary waits
	// for the synchronous one.
	awaitValue(t, ctx, async, "SELECT v FROM visibility WHERE id = 1", "2")
	replayed, err := cluster.QueryString(ctx, async, "SELECT pg_last_wal_replay_lsn()::text")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := cluster.QueryString(ctx, p, "SELECT v FROM visibility WHERE id = 1"); err != nil || got != "1" {
		t.Fatalf("the primary shows %q (%v) while its writer waits: the window is not open", got, err)
	}
	lsn, err := pgreplica.ParseLSN(replayed)
	if err != nil {
		t.Fatal(err)
	}

	sess := pgreplica.NewSession()
	sctx := pgreplica.WithSession(ctx, sess)
	var v, port int
	if err := db.QueryRowContext(pgreplica.WithMinLSN(sctx, lsn), "SELECT v, inet_server_port() FROM visibility WHERE id = 1").Scan(&v, &port); err != nil {
		t.Fatal(err)
	}
	if v != 2 || nodeOf(t, port) != async {
		t.Fatalf("the session's replica read saw %d on node %d, want 2 on node %d", v, nodeOf(t, port), async)
	}

	c, err := pgreplica.ConnectorOf(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	free := func() {}
	if hold != nil {
		free = hold(async)
	}
	read := make(chan int, 1)
	go func() {
		var v int
		if err := db.QueryRowContext(pgreplica.WithPrimary(sctx), "SELECT v FROM visibility WHERE id = 1").Scan(&v); err != nil {
			t.Error(err)
		}
		read <- v
	}()
	waiting := time.NewTicker(time.Millisecond)
	defer waiting.Stop()
	for c.Stats().PrimaryVisibilityWaits == 0 {
		select {
		case v := <-read:
			t.Fatalf("the session saw 2 on a replica, then %d on the primary before its writer's commit ended", v)
		case <-waiting.C:
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	free()
	resume()
	if err := <-committed; err != nil {
		t.Fatal(err)
	}
	if v := <-read; v != 2 {
		t.Fatalf("the session saw 2 on a replica, then %d on the primary", v)
	}
}

// awaitValue waits until query on node i answers want.
func awaitValue(t *testing.T, ctx context.Context, i int, query, want string) {
	t.Helper()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		got, err := cluster.QueryString(ctx, i, query)
		if err == nil && got == want {
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("node %d: %s answered %q (%v), want %q", i, query, got, errors.Join(err, ctx.Err()), want)
		}
	}
}
