// Package faulttest runs pgreplica against a real primary and two
// replicas with one replica's link going through a fault proxy: a slow
// link, a partition, a reset. Run with PGREPLICA_INTEGRATION=require to
// make a missing PostgreSQL a failure.
package faulttest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration"
	"github.com/pgreplica/pgreplica/integration/itest"
)

// cluster is the primary and two replicas the tests share; each test
// proxies a replica of its own choosing and heals it when it ends.
var cluster *integration.Cluster

func TestMain(m *testing.M) {
	os.Exit(integration.Main(m, integration.Options{}, &cluster))
}

// fixture is one test's pgreplica handle on the cluster with replica
// slow reached through the proxy p.
type fixture struct {
	t    *testing.T
	db   *sql.DB
	cn   *pgreplica.Connector
	p    *integration.FaultProxy
	node int // the proxied replica
	app  string
}

// setup proxies node i and opens a pgreplica *sql.DB on the cluster with
// it, with extra options (pgreplica_*, tuning_*); it waits until the
// monitor sees every replica caught up.
func setup(t *testing.T, i int, params ...string) *fixture {
	t.Helper()
	cluster.Need(t)
	p := cluster.Proxy(t, i)
	t.Cleanup(func() {
		if err := p.Heal(); err != nil {
			t.Error(err)
		}
	})
	f := &fixture{t: t, p: p, node: i, app: "pgr_" + strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())}
	f.db, f.cn = f.open(params...)
	ctx := testCtx(t, 60*time.Second)
	if err := cluster.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	f.await(ctx, 10*time.Second, "the monitor to see both replicas caught up", func() (bool, string) {
		for n := 1; n < cluster.Len(); n++ {
			if ns := f.status(n); !ns.Reads || ns.LagBytes != 0 || ns.LagTime != 0 || ns.RTT == 0 {
				return false, describe(ns)
			}
		}
		return true, ""
	})
	return f
}

// open returns a pgreplica *sql.DB through the fixture's proxy and its
// Connector; both are closed with the test.
func (f *fixture) open(params ...string) (*sql.DB, *pgreplica.Connector) {
	t := f.t
	t.Helper()
	dsn := cluster.DSNVia(f.p) + "&application_name=" + f.app
	for _, p := range params {
		dsn += "&" + p
	}
	return itest.Open(t, dsn)
}

// addr is node n's address as the DSN names it: the proxy's for the
// proxied replica.
func (f *fixture) addr(n int) string {
	if n == f.node {
		return f.p.Addr()
	}
	return fmt.Sprintf("127.0.0.1:%d", cluster.Port(n))
}

// status returns what the connector knows of node n.
func (f *fixture) status(n int) pgreplica.NodeStatus {
	f.t.Helper()
	for _, ns := range f.cn.Nodes() {
		if ns.Addr == f.addr(n) {
			return ns
		}
	}
	f.t.Fatalf("Nodes() has no entry for node %d (%s)", n, f.addr(n))
	return pgreplica.NodeStatus{}
}

// statuses renders both replicas' statuses for a failure message.
func (f *fixture) statuses() string {
	return describe(f.status(1)) + " / " + describe(f.status(2))
}

// await polls cond every 10 ms until it holds, failing the test after d
// (or when ctx ends) with cond's last explanation.
func (f *fixture) await(ctx context.Context, d time.Duration, what string, cond func() (bool, string)) time.Duration {
	f.t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if err := itest.WaitFor(ctx, what, cond); err != nil {
		f.t.Fatalf("after %v: %v", d, err)
	}
	return time.Since(start)
}

// startWriter inserts a row every interval through db until the returned
// stop is called (also when the test ends), so that the primary's WAL
// keeps moving; stop fails the test if a write failed.
func startWriter(t *testing.T, db *sql.DB, table string, every time.Duration) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var errs []error
	go func() {
		defer close(done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for seq := 1; ; seq++ {
			if _, err := db.ExecContext(pgreplica.WithPrimary(ctx), "INSERT INTO "+table+" (seq) VALUES ($1)", seq); err != nil && ctx.Err() == nil {
				errs = append(errs, err)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
			if len(errs) > 0 {
				t.Errorf("background writer: %d writes failed, first: %v", len(errs), errs[0])
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// The helpers every cluster test package shares (internal/itest), under
// this package's names.
var (
	testCtx  = itest.Ctx
	describe = itest.Describe
	durStats = itest.DurStats
)

func newTable(t *testing.T) string { return itest.NewTable(t, cluster, "fault") }

func servedBy(ctx context.Context, db *sql.DB) (int, error) { return itest.ServedBy(ctx, db, cluster) }
