// Package itest holds what tests against a harness cluster share (the
// project's own, and yours): opening the driver or the pgx handle on a
// DSN (which may carry the test-only tuning_* parameters), contexts
// bounded with the test, awaiting a condition, which node served a read,
// throwaway tables, and summaries of samples.
package itest

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration"
	"github.com/pgreplica/pgreplica/internal/tuning"
	"github.com/pgreplica/pgreplica/pgreplicapgx"
)

// Ctx returns a context that ends after d or with the test.
func Ctx(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// ParseDSN is pgreplica.ParseDSN for tests: it takes the test-only
// tuning_* parameters (tuning_monitor_interval=1h, tuning_hedge_delay=-1s,
// ...; see tuning.Split) out of dsn first and sets their knobs on the
// Config. A DSN that has any must go through it (or Open, ParsePgx,
// NewPgx): the driver would pass them on to the server, which refuses
// them.
func ParseDSN(dsn string) (pgreplica.Config, error) {
	dsn, k, err := tuning.Split(dsn)
	if err != nil {
		return pgreplica.Config{}, err
	}
	cfg, err := pgreplica.ParseDSN(dsn)
	if err == nil && k != (tuning.Knobs{}) {
		tuning.Set(&cfg, k)
	}
	return cfg, err
}

// ParsePgx is pgreplicapgx.ParseConfig for tests, tuning_* parameters
// taken as ParseDSN takes them.
func ParsePgx(dsn string) (*pgreplicapgx.Config, error) {
	dsn, k, err := tuning.Split(dsn)
	if err != nil {
		return nil, err
	}
	cfg, err := pgreplicapgx.ParseConfig(dsn)
	if err == nil && k != (tuning.Knobs{}) {
		tuning.Set(&cfg.Routing, k)
	}
	return cfg, err
}

// NewPgx is pgreplicapgx.New for tests, tuning_* parameters taken as
// ParseDSN takes them.
func NewPgx(ctx context.Context, dsn string) (*pgreplicapgx.Pool, error) {
	cfg, err := ParsePgx(dsn)
	if err != nil {
		return nil, err
	}
	return pgreplicapgx.NewWithConfig(ctx, cfg)
}

// Open returns a pgreplica *sql.DB on dsn (tuning_* parameters taken as
// ParseDSN takes them), pinged, and its Connector; both are closed with
// the test.
func Open(t testing.TB, dsn string) (*sql.DB, *pgreplica.Connector) {
	t.Helper()
	cfg, err := ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return OpenConfig(t, cfg)
}

// OpenConfig is Open on a Config (from ParseDSN, then changed).
func OpenConfig(t testing.TB, cfg pgreplica.Config) (*sql.DB, *pgreplica.Connector) {
	t.Helper()
	cn, err := pgreplica.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(cn)
	t.Cleanup(func() { db.Close() })
	if err := db.PingContext(Ctx(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	return db, cn
}

// WaitFor polls cond every 10 ms until it holds or ctx ends; the error
// quotes cond's last explanation.
func WaitFor(ctx context.Context, what string, cond func() (bool, string)) error {
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

// ServedBy runs SELECT inet_server_port() through db and returns the node
// of c that answered (a proxy in between does not change the port).
func ServedBy(ctx context.Context, db *sql.DB, c *integration.Cluster) (int, error) {
	var port int
	if err := db.QueryRowContext(ctx, "SELECT inet_server_port()").Scan(&port); err != nil {
		return -1, err
	}
	if n := c.NodeAt(port); n >= 0 {
		return n, nil
	}
	return -1, fmt.Errorf("port %d is no node of the cluster", port)
}

var tableSeq atomic.Int64

// NewTable creates a table (seq bigint) on c's primary, named after prefix,
// and drops it when the test ends.
func NewTable(t testing.TB, c *integration.Cluster, prefix string) string {
	t.Helper()
	ctx := Ctx(t, 30*time.Second)
	name := fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), tableSeq.Add(1))
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

// Describe renders a NodeStatus for failure messages.
func Describe(ns pgreplica.NodeStatus) string {
	return fmt.Sprintf("{%s role=%s err=%v tl=%d lsn=%s paused=%v recv=%q sync=%q lagBytes=%d lagTime=%v rtt=%v reads=%v why=%q}",
		ns.Addr, ns.Role, ns.Err, ns.Timeline, ns.LSN, ns.ReplayPaused, ns.Receiver, ns.SyncState,
		ns.LagBytes, ns.LagTime, ns.RTT, ns.Reads, ns.Why)
}

// Summary renders samples as count, min, p5, median, p95 and max.
func Summary[T cmp.Ordered](xs []T, show func(T) string) string {
	if len(xs) == 0 {
		return "no samples"
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	q := func(p float64) string { return show(s[int(p*float64(len(s)-1)+0.5)]) }
	return fmt.Sprintf("n=%d min=%s p5=%s median=%s p95=%s max=%s", len(s), q(0), q(0.05), q(0.5), q(0.95), q(1))
}

// DurStats is Summary for durations, rounded to milliseconds.
func DurStats(ds []time.Duration) string {
	return Summary(ds, func(d time.Duration) string { return d.Round(time.Millisecond).String() })
}

// SetApplyDelay sets replica i's recovery_min_apply_delay to d for the
// rest of the test: when it ends the delay goes back to 0 and the test
// waits until every replica caught up.
func SetApplyDelay(t testing.TB, c *integration.Cluster, i int, d time.Duration) {
	t.Helper()
	if err := c.SetApplyDelay(Ctx(t, 30*time.Second), i, d); err != nil {
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
