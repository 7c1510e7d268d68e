package topologytest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration"
	"github.com/pgreplica/pgreplica/integration/itest"
)

// cluster is the primary and two replicas shared by the non-destructive
// tests. Tests that kill, stop or promote a node start their own.
var cluster *integration.Cluster

func TestMain(m *testing.M) {
	os.Exit(integration.Main(m, integration.Options{}, &cluster))
}

// longMode stretches the sustained checks to the durations of the issue.
func longMode() bool { return os.Getenv("PGREPLICA_LONG") == "1" }

// startCluster starts a cluster for one destructive test and closes it
// with the test.
func startCluster(t *testing.T, opts integration.Options) *integration.Cluster {
	t.Helper()
	cluster.Need(t) // no PostgreSQL: skip (or fail under require) like the rest
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if testing.Verbose() && opts.Logf == nil {
		opts.Logf = t.Logf
	}
	c, err := integration.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return c
}

// open returns a pgreplica *sql.DB on c with extra options (pgreplica_*,
// and tuning_* as itest.ParseDSN takes them), and
// its Connector. Both are closed with the test.
func open(t *testing.T, c *integration.Cluster, params ...string) (*sql.DB, *pgreplica.Connector) {
	t.Helper()
	c.Need(t)
	dsn := c.DSN() + "&application_name=" + appName(t)
	for _, p := range params {
		dsn += "&" + p
	}
	return itest.Open(t, dsn)
}

// appName tags a test's server sessions.
func appName(t *testing.T) string {
	r := strings.NewReplacer("/", "_", " ", "_", "#", "_", "=", "_")
	return "pgr_" + r.Replace(t.Name())
}

// spread runs n reads with ctx and counts them by serving node.
func spread(t *testing.T, ctx context.Context, db *sql.DB, c *integration.Cluster, n int) map[int]int {
	t.Helper()
	seen := map[int]int{}
	for range n {
		i, err := servedBy(ctx, db, c)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		seen[i]++
	}
	return seen
}

// status returns what cn knows about node i of c.
func status(t *testing.T, cn *pgreplica.Connector, c *integration.Cluster, i int) pgreplica.NodeStatus {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", c.Port(i))
	for _, ns := range cn.Nodes() {
		if ns.Addr == addr {
			return ns
		}
	}
	t.Fatalf("Nodes() has no entry for node %d (%s)", i, addr)
	return pgreplica.NodeStatus{}
}

// within returns a context bounded by d for one wait inside a test.
func within(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

// writer inserts a row every interval through db until stopped, so the
// primary's WAL position keeps moving.
type writer struct {
	cancel  context.CancelFunc
	done    chan struct{}
	ok      atomic.Int64
	mu      sync.Mutex
	errs    []error
	started time.Time
	writes  []time.Time // when each write returned
}

func startWriter(t *testing.T, db *sql.DB, table string, every time.Duration) *writer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &writer{cancel: cancel, done: make(chan struct{}), started: time.Now()}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for seq := int64(1); ; seq++ {
			_, err := db.ExecContext(ctx, "INSERT INTO "+table+" (seq) VALUES ($1)", seq)
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				w.mu.Lock()
				w.errs = append(w.errs, err)
				w.mu.Unlock()
			default:
				w.ok.Add(1)
				w.mu.Lock()
				w.writes = append(w.writes, time.Now())
				w.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { w.stop(t) })
	return w
}

// maxGap is the longest time between two returned writes (or a window edge
// and the nearest write) within [from, to], from the writer's start at the
// earliest: how far the writer fell behind its rhythm there, e.g. on a
// loaded machine.
func (w *writer) maxGap(from, to time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	prev, gap := from, time.Duration(0)
	if prev.Before(w.started) {
		prev = w.started
	}
	for _, at := range w.writes {
		if at.Before(from) {
			continue
		}
		if at.After(to) {
			break
		}
		gap, prev = max(gap, at.Sub(prev)), at
	}
	return max(gap, to.Sub(prev))
}

// stop ends the writer and fails t if any write failed.
func (w *writer) stop(t *testing.T) {
	t.Helper()
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.errs) > 0 {
		t.Errorf("background writer: %d of %d writes failed, first: %v", len(w.errs), int(w.ok.Load())+len(w.errs), w.errs[0])
		w.errs = nil
	}
}

// setApplyDelay sets recovery_min_apply_delay on replica i of c and removes
// it (waiting for the replica to catch up) when the test ends.
func setApplyDelay(t *testing.T, c *integration.Cluster, i int, d time.Duration) {
	t.Helper()
	itest.SetApplyDelay(t, c, i, d)
}

// pauseReplay pauses replay on replica i of c and resumes it when the test
// ends (ResumeReplay on a running replica is harmless).
func pauseReplay(t *testing.T, c *integration.Cluster, i int) {
	t.Helper()
	if err := c.PauseReplay(testCtx(t, 30*time.Second), i); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.ResumeReplay(ctx, i); err != nil {
			t.Error(err)
		}
	})
}

// awaitCaughtUp waits until the harness sees every replica caught up and
// the connector's monitor reports no lag for any of them.
func awaitCaughtUp(t *testing.T, ctx context.Context, c *integration.Cluster, cn *pgreplica.Connector) {
	t.Helper()
	if err := c.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := within(ctx, 5*time.Second)
	defer cancel()
	err := waitFor(wctx, "the monitor to see the replicas caught up", func() (bool, string) {
		for i := 1; i < c.Len(); i++ {
			if ns := status(t, cn, c, i); !ns.Reads || ns.LagTime != 0 || ns.LagBytes != 0 {
				return false, describe(ns)
			}
		}
		return true, ""
	})
	if err != nil {
		t.Fatal(err)
	}
}

// head renders the first few entries of a list for a failure message.
func head(s []string) string {
	const n = 5
	if len(s) <= n {
		return fmt.Sprint(s)
	}
	return fmt.Sprintf("%v (+%d more)", s[:n], len(s)-n)
}

// The helpers every cluster test package shares (internal/itest), under
// this package's names.
var (
	testCtx  = itest.Ctx
	waitFor  = itest.WaitFor
	describe = itest.Describe
	durStats = itest.DurStats
)

func newTable(t *testing.T, c *integration.Cluster) string { return itest.NewTable(t, c, "topo") }

func servedBy(ctx context.Context, db *sql.DB, c *integration.Cluster) (int, error) {
	return itest.ServedBy(ctx, db, c)
}

// mustQuery runs a one-value query on node i of c.
func mustQuery(t *testing.T, c *integration.Cluster, i int, sql string, args ...any) string {
	t.Helper()
	s, err := c.QueryString(testCtx(t, 10*time.Second), i, sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
