package topologytest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration"
)

// TestPrimaryRestart: the primary is restarted (fast shutdown, then start)
// while the pool holds idle connections to it, which the shutdown ended
// (FATAL 57P01, then EOF). No write was in flight, so none may be reported
// as ErrWriteOutcomeUnknown: once the monitor sees the primary again, the
// next writes succeed on fresh connections; while it is stopped, a write
// waits for a primary until its deadline, then fails with ErrNoPrimary,
// naming the host and the refused connection and how long it waited. The
// ping of long-idle connections (tuning_health_check_after) is turned
// off, so that only the check of every pooled connection before it is lent
// can tell the dead ones: with the ping, whether a restart outlasts its
// 1 s threshold would decide. For both inner drivers, one after the other
// on one cluster.
func TestPrimaryRestart(t *testing.T) {
	c := startCluster(t, integration.Options{Replicas: 1})
	for _, inner := range []string{"pgx", "pq"} {
		t.Run(inner, func(t *testing.T) { restartPrimary(t, c, inner) })
	}
}

// idleConns is how many primary connections the pool holds at a restart.
const idleConns = 4

func restartPrimary(t *testing.T, c *integration.Cluster, inner string) {
	db, cn := open(t, c, "pgreplica_driver="+inner, "tuning_health_check_after=-1s")
	ctx := testCtx(t, 90*time.Second)
	tbl := newTable(t, c)
	insert := func() error {
		_, err := db.ExecContext(ctx, "INSERT INTO "+tbl+" (seq) VALUES (1)")
		return err
	}

	// A restart with idle connections pooled: the next writes succeed.
	fillPrimaryPool(t, ctx, db, tbl)
	if err := c.Stop(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx, 0); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	awaitPrimary(t, ctx, cn, c, started)
	for k := range idleConns {
		if err := insert(); err != nil {
			t.Errorf("%s: write %d after the restart: %v", inner, k+1, err)
		}
	}

	// A stopped primary: definite errors that say why.
	fillPrimaryPool(t, ctx, db, tbl)
	if err := c.Stop(ctx, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := c.Start(sctx, 0); err != nil {
			t.Error(err)
		}
		if err := c.WaitStreaming(sctx); err != nil {
			t.Error(err)
		}
	})
	primary := fmt.Sprintf("127.0.0.1:%d", c.Port(0))
	// While there is no primary a write waits for one until its context's
	// deadline: these have a short one.
	insertWithin := func(d time.Duration) error {
		sctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		_, err := db.ExecContext(sctx, "INSERT INTO "+tbl+" (seq) VALUES (1)")
		return err
	}
	refused := func(when string, err error) {
		t.Helper()
		switch {
		case err == nil:
			t.Errorf("%s: write %s succeeded", inner, when)
		case errors.Is(err, pgreplica.ErrWriteOutcomeUnknown):
			t.Errorf("%s: write %s: %v; the write was never sent", inner, when, err)
		case !errors.Is(err, pgreplica.ErrNoPrimary):
			t.Errorf("%s: write %s: %v; want ErrNoPrimary", inner, when, err)
		case !strings.Contains(err.Error(), primary) || !namesShutdown(err):
			t.Errorf("%s: write %s: %q does not say that %s shut down or refused the connection", inner, when, err, primary)
		case !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "waited"):
			t.Errorf("%s: write %s: %q does not say it waited for a primary until its deadline", inner, when, err)
		}
		t.Logf("%s: write %s: %v", inner, when, err)
	}
	// Whether or not the monitor noticed yet: the pool finds its
	// connections dead, and a new one is refused.
	refused("right after the stop", insertWithin(2*time.Second))
	// Once the monitor noticed: the topology says why.
	wctx, cancel := within(ctx, 10*time.Second)
	defer cancel()
	if err := waitFor(wctx, "the monitor to see the primary down", func() (bool, string) {
		ns := status(t, cn, c, 0)
		return ns.Err != nil, describe(ns)
	}); err != nil {
		t.Fatal(err)
	}
	err := insertWithin(2 * time.Second)
	refused("once the monitor saw the primary down", err)
	if err != nil && !strings.Contains(err.Error(), "in recovery") {
		t.Errorf("%s: %q does not say the other host is in recovery", inner, err)
	}
}

// fillPrimaryPool leaves idleConns connections to the primary idle in the
// pool: as many transactions at once, each holding one.
func fillPrimaryPool(t *testing.T, ctx context.Context, db *sql.DB, tbl string) {
	t.Helper()
	txs := make([]*sql.Tx, idleConns)
	var wg sync.WaitGroup
	errs := make([]error, idleConns)
	for k := range txs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tx, err := db.BeginTx(ctx, nil)
			if err == nil {
				_, err = tx.ExecContext(ctx, "INSERT INTO "+tbl+" (seq) VALUES (0)")
			}
			txs[k], errs[k] = tx, err
		}()
	}
	wg.Wait()
	for k, tx := range txs {
		if errs[k] != nil {
			t.Fatal(errs[k])
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
}

// awaitPrimary waits until the monitor has probed node 0 as a healthy
// primary after since.
func awaitPrimary(t *testing.T, ctx context.Context, cn *pgreplica.Connector, c *integration.Cluster, since time.Time) {
	t.Helper()
	wctx, cancel := within(ctx, 10*time.Second)
	defer cancel()
	if err := waitFor(wctx, "the monitor to see the primary back", func() (bool, string) {
		ns := status(t, cn, c, 0)
		return ns.Err == nil && ns.Role == pgreplica.RolePrimary && ns.Sampled.After(since), describe(ns)
	}); err != nil {
		t.Fatal(err)
	}
}

// namesShutdown reports whether err names a cause of a server going down:
// a refused or reset connection, or the server's own shutdown messages
// (57P01 terminating, 57P03 shutting down), depending on which the
// monitor's probe or the pool met first.
func namesShutdown(err error) bool {
	for _, cause := range []string{"connection refused", "connection reset", "57P01", "57P03"} {
		if strings.Contains(err.Error(), cause) {
			return true
		}
	}
	return false
}
