package topologytest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration"
)

// cluster is the primary and two replicas shared by the non-destructive
// tests. Tests that kill, stop or promote a node start their own.
var cluster *integration.Cluster

func TestMain(m *testing.M) {
	os.Exit(integration.Main(m, integration.Options{}, &cluster))
}

// longMode stretches the sustained checks to the durations of the issue.
func longMode() bool { return os.Getenv("PGREPLICA_LONG") == "1" }

// testCtx bounds every wait of a test.
func testCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

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

// open returns a pgreplica *sql.DB on c with extra pgreplica_* options, and
// its Connector. Both are closed with the test.
func open(t *testing.T, c *integration.Cluster, params ...string) (*sql.DB, *pgreplica.Connector) {
	t.Helper()
	c.Need(t)
	dsn := c.DSN() + "&application_name=" + appName(t)
	for _, p := range params {
		dsn += "&" + p
	}
	db, err := sql.Open(pgreplica.DriverName, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := testCtx(t, 30*time.Second)
	if err := db.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	cn, err := pgreplica.ConnectorOf(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	return db, cn
}

// appName tags a test's server sessions.
func appName(t *testing.T) string {
	r := strings.NewReplacer("/", "_", " ", "_", "#", "_", "=", "_")
	return "pgr_" + r.Replace(t.Name())
}

var tableSeq atomic.Int64

// newTable creates a table (seq bigint) on c's primary, dropped with the
// test.
func newTable(t *testing.T, c *integration.Cluster) string {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	name := fmt.Sprintf("topo_%d_%d", os.Getpid(), tableSeq.Add(1))
	if err := c.Exec(ctx, c.Primary(), "CREATE TABLE "+name+" (seq bigint NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Exec(ctx, c.Primary(), "DROP TABLE IF EXISTS "+name)
	})
	return name
}

// servedBy runs SELECT inet_server_port() through db and returns the node
// that answered.
func servedBy(ctx context.Context, db *sql.DB, c *integration.Cluster) (int, error) {
	var port int
	if err := db.QueryRowContext(ctx, "SELECT inet_server_port()").Scan(&port); err != nil {
		return -1, err
	}
	if n := c.NodeAt(port); n >= 0 {
		return n, nil
	}
	return -1, fmt.Errorf("port %d is no node of the cluster", port)
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

// describe renders a NodeStatus for failure messages.
func describe(ns pgreplica.NodeStatus) string {
	return fmt.Sprintf("{%s role=%s err=%v tl=%d lsn=%s paused=%v recv=%q sync=%q lagBytes=%d lagTime=%v rtt=%v reads=%v why=%q}",
		ns.Addr, ns.Role, ns.Err, ns.Timeline, ns.LSN, ns.ReplayPaused, ns.Receiver, ns.SyncState,
		ns.LagBytes, ns.LagTime, ns.RTT, ns.Reads, ns.Why)
}

// waitFor polls cond every 10 ms until it holds or ctx ends; the error
// quotes cond's last explanation.
func waitFor(ctx context.Context, what string, cond func() (bool, string)) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var last string
	for {
		ok, why := cond()
		if ok {
			return nil
		}
		last = why
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last: %s)", what, ctx.Err(), last)
		case <-tick.C:
		}
	}
}

// within returns a context bounded by d for one wait inside a test.
func within(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

// writer inserts a row every interval through db until stopped, so the
// primary's WAL position keeps moving.
type writer struct {
	cancel context.CancelFunc
	done   chan struct{}
	ok     atomic.Int64
	mu     sync.Mutex
	errs   []error
}

func startWriter(t *testing.T, db *sql.DB, table string, every time.Duration) *writer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &writer{cancel: cancel, done: make(chan struct{})}
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

// durStats summarises samples: count, min, p5, median, p95, max.
func durStats(ds []time.Duration) string {
	if len(ds) == 0 {
		return "no samples"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	q := func(p float64) time.Duration { return s[int(p*float64(len(s)-1)+0.5)] }
	r := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	return fmt.Sprintf("n=%d min=%v p5=%v median=%v p95=%v max=%v", len(s), r(s[0]), r(q(0.05)), r(q(0.5)), r(q(0.95)), r(s[len(s)-1]))
}

// setApplyDelay sets recovery_min_apply_delay on replica i of c and removes
// it (waiting for the replica to catch up) when the test ends.
func setApplyDelay(t *testing.T, c *integration.Cluster, i int, d time.Duration) {
	t.Helper()
	if err := c.SetApplyDelay(testCtx(t, 30*time.Second), i, d); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.SetApplyDelay(ctx, i, 0); err != nil {
			t.Error(err)
		}
		if err := c.WaitCaughtUp(ctx); err != nil {
			t.Error(err)
		}
	})
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
