package topologytest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration"
	"github.com/pgreplica/pgreplica/integration/itest"
)

// TestWithReplicated: a write of a WithReplicated(ctx, n) context returns
// once n replicas flushed it, and that is what keeps it across a failover.
//
//   - Replica 2 frozen: n=2 fails with ErrNotReplicated (1 of 2, the
//     context's deadline) for an Exec, a Commit and an INSERT … RETURNING
//     through QueryRow, the row committed on the primary; n=1 succeeds.
//     pgreplicapgx refuses the context (ErrBadConfig) rather than ignore it.
//   - No replica receiving WAL: a plain write is acknowledged and a
//     WithReplicated(ctx, 1) write is not. The primary is then killed
//     (SIGKILL) and replica 1 promoted: the plain write is gone, the loss
//     window WithReplicated closes, while a write acknowledged with n=2
//     before the freeze is there.
func TestWithReplicated(t *testing.T) {
	c := startCluster(t, integration.Options{})
	db, _ := open(t, c, "tuning_monitor_interval=50ms")
	table := newTable(t, c)
	// Each write is a row whose seq names it.
	seq := map[string]int{"kept": 1, "exec-1-of-2": 2, "commit-1-of-2": 3, "exec-1-of-1": 4, "plain": 5, "unacknowledged": 6, "query-1-of-2": 7}
	insert := "INSERT INTO " + table + " (seq) VALUES ($1)"
	onPrimary := func(i int, v string) bool {
		return mustQuery(t, c, i, fmt.Sprintf("SELECT count(*) FROM %s WHERE seq = %d", table, seq[v])) == "1"
	}
	notReplicated := func(err error, have int) {
		t.Helper()
		var nr *pgreplica.NotReplicatedError
		if !errors.As(err, &nr) || !errors.Is(err, pgreplica.ErrNotReplicated) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("want a NotReplicatedError ended by the deadline, got %v", err)
		}
		if errors.Is(err, pgreplica.ErrWriteOutcomeUnknown) {
			t.Fatalf("a write known to be committed on the primary reads as of unknown outcome: %v", err)
		}
		if nr.Have != have || nr.Position == 0 {
			t.Fatalf("%v: want %d replicas and the write's position", err, have)
		}
	}
	bounded := func(n int) (context.Context, context.CancelFunc) {
		return context.WithTimeout(pgreplica.WithReplicated(context.Background(), n), 500*time.Millisecond)
	}

	// Every replica up: both flush the write.
	ctx, cancel := bounded(2)
	if _, err := db.ExecContext(ctx, insert, seq["kept"]); err != nil {
		t.Fatalf("n=2, both replicas up: %v", err)
	}
	cancel()

	if err := c.Freeze(2); err != nil {
		t.Fatal(err)
	}
	ctx, cancel = bounded(2)
	_, err := db.ExecContext(ctx, insert, seq["exec-1-of-2"])
	cancel()
	notReplicated(err, 1)
	if !onPrimary(c.Primary(), "exec-1-of-2") {
		t.Fatal("a write that was not replicated enough is not on the primary")
	}
	ctx, cancel = bounded(2)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, insert, seq["commit-1-of-2"]); err != nil {
		t.Fatal(err)
	}
	notReplicated(tx.Commit(), 1)
	cancel()
	if !onPrimary(c.Primary(), "commit-1-of-2") {
		t.Fatal("a commit that was not replicated enough is not on the primary")
	}
	ctx, cancel = bounded(2)
	var back int
	err = db.QueryRowContext(ctx, insert+" RETURNING seq", seq["query-1-of-2"]).Scan(&back)
	cancel()
	notReplicated(err, 1)
	if !onPrimary(c.Primary(), "query-1-of-2") {
		t.Fatal("a write through Query that was not replicated enough is not on the primary")
	}
	pool, err := itest.NewPgx(context.Background(), c.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ctx, cancel = context.WithTimeout(pgreplica.WithReplicated(context.Background(), 1), 10*time.Second)
	if _, err := pool.Exec(ctx, insert, 99); !errors.Is(err, pgreplica.ErrBadConfig) {
		t.Fatalf("pgreplicapgx with WithReplicated: %v, want ErrBadConfig", err)
	}
	cancel()
	ctx, cancel = bounded(1)
	if _, err := db.ExecContext(ctx, insert, seq["exec-1-of-1"]); err != nil {
		t.Fatalf("n=1 with replica 1 up: %v", err)
	}
	cancel()

	// No replica receiving: only the plain write is acknowledged. (A
	// frozen replica would not do: the kernel queues what the primary
	// sends it, and it reads that when it runs again.)
	if err := c.Thaw(2); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{1, 2} {
		stopReceiving(t, c, i)
	}
	if _, err := db.ExecContext(context.Background(), insert, seq["plain"]); err != nil {
		t.Fatal(err)
	}
	ctx, cancel = bounded(1)
	_, err = db.ExecContext(ctx, insert, seq["unacknowledged"])
	cancel()
	notReplicated(err, 0)

	old := c.Primary()
	if err := c.Kill(old); err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(context.Background(), time.Minute)
	defer pcancel()
	if err := c.Promote(pctx, 1); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, v := range []string{"kept", "exec-1-of-1", "plain", "unacknowledged"} {
		got[v] = onPrimary(1, v)
	}
	t.Logf("after the failover, on the new primary: %v", got)
	if !got["kept"] || !got["exec-1-of-1"] {
		t.Errorf("writes acknowledged by WithReplicated were lost in the failover: %v", got)
	}
	if got["plain"] {
		t.Errorf("the plain write reached a frozen replica: the test shows no loss window (%v)", got)
	}
}

// stopReceiving stops replica i's WAL receiver (primary_conninfo emptied)
// and returns once it is gone.
func stopReceiving(t *testing.T, c *integration.Cluster, i int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, q := range []string{"ALTER SYSTEM SET primary_conninfo = ''", "SELECT pg_reload_conf()"} {
		if err := c.Exec(ctx, i, q); err != nil {
			t.Fatal(err)
		}
	}
	for mustQuery(t, c, i, "SELECT count(*) FROM pg_stat_wal_receiver") != "0" {
		select {
		case <-ctx.Done():
			t.Fatalf("replica %d still receives WAL", i)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
