package topologytest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration"
	"github.com/pgreplica/pgreplica/integration/itest"
)

// TestFrozenReplica: one replica stops answering (every process of it
// stopped with SIGSTOP: alive to TCP, accepting connections, answering
// nothing, as a host with a stalled disk or a hung VM) while 8 goroutines
// read with 1 s deadlines. No read may fail: those in flight on the frozen
// replica are hedged to the other, later ones avoid it. The reads' p99
// during the freeze stays within the hedge delay of the p99 before it; the
// monitor marks the replica down within its probe timeout; hedges stay
// within their budget; after the thaw the replica serves reads again.
func TestFrozenReplica(t *testing.T) {
	for _, tc := range []struct{ name, front, params string }{
		{"pgx", "pgx", ""},
		{"pq", "pq", ""},
		{"pgreplicapgx", "pgreplicapgx", ""},
		// Every borrowed connection is health-checked first: a ping on
		// the frozen server must give up as a read would (lib/pq waits in
		// its read past its context).
		{"pq_health_check", "pq", "tuning_health_check_after=1ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startCluster(t, integration.Options{})
			ctx := testCtx(t, 2*time.Minute)
			params := []string{"pgreplica_consistency=eventual"}
			if tc.params != "" {
				params = append(params, tc.params)
			}
			read, cn := frontDoor(t, c, tc.front, params...)
			const frozen = 1
			readers, phase := 8, 2*time.Second
			if longMode() {
				phase = 6 * time.Second
			}

			before := readFor(ctx, read, readers, phase)
			pausedAt := time.Now() // the readers stop between the phases
			if before.failed > 0 || before.served[frozen] == 0 {
				t.Fatalf("before the freeze: %s", before)
			}
			// A replica that lost a hedge in the first phase is kept from
			// reads until its next probe: frozen then, no read would go
			// there, and none would need a hedge.
			rctx, rcancel := within(ctx, 5*time.Second)
			if err := waitFor(rctx, "the replica to freeze to take reads", func() (bool, string) {
				ns := status(t, cn, c, frozen)
				return ns.Reads, describe(ns)
			}); err != nil {
				t.Fatal(err)
			}
			rcancel()
			hedgesBefore := cn.Stats().Hedges

			if err := c.Freeze(frozen); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Thaw(frozen) })
			frozenAt := time.Now()
			var downAfter time.Duration
			var during phaseResult
			// Idle longer than the health check's threshold
			// (tuning.Knobs.HealthCheckAfter, 1 s; a loaded machine
			// between the phases), a connection is pinged before its next
			// read: the ping meets the freeze and gives up, and the read
			// goes elsewhere without a hedge.
			pinged := time.Since(pausedAt) >= time.Second
			atFreeze := status(t, cn, c, frozen) // taking reads, or why not
			var wg sync.WaitGroup
			wg.Go(func() { during = readFor(ctx, read, readers, phase) })
			wg.Go(func() {
				wctx, cancel := within(ctx, phase)
				defer cancel()
				if waitFor(wctx, "the frozen replica to be marked down", func() (bool, string) {
					ns := status(t, cn, c, frozen)
					return ns.Err != nil, describe(ns)
				}) == nil {
					downAfter = time.Since(frozenAt)
				}
			})
			wg.Wait()
			if err := c.Thaw(frozen); err != nil {
				t.Fatal(err)
			}
			s := cn.Stats()
			hedges := s.Hedges - hedgesBefore
			hedgeDelay := 50 * time.Millisecond // the hedge delay's floor (tuning.Knobs.HedgeDelay): answers here are far faster
			t.Logf("before: %s", before)
			t.Logf("frozen: %s", during)
			t.Logf("frozen replica marked down after %v; hedges %d (won %d, denied %d) for %d replica reads; health checks met the freeze first: %v; at the freeze: %s",
				downAfter.Round(time.Millisecond), hedges, s.HedgeWins, s.HedgesDenied, s.ReplicaReads, pinged, describe(atFreeze))

			if during.failed > 0 {
				t.Errorf("%d of %d reads failed during the freeze, first: %v", during.failed, during.total(), during.firstErr)
			}
			// The slack covers what a loaded 2-core machine adds to a read
			// that had to wait for a hedge (a new connection to the other
			// replica, scheduling); the hedge delay is the cost the design
			// accepts.
			const slack = 100 * time.Millisecond
			if limit := hedgeDelay + before.p99() + slack; during.p99() > limit {
				t.Errorf("p99 during the freeze %v > hedge delay %v + p99 before %v + slack %v",
					during.p99(), hedgeDelay, before.p99(), slack)
			}
			if downAfter == 0 || downAfter > 2*time.Second {
				t.Errorf("the frozen replica was marked down after %v, want within the probe timeout (1s) and an interval", downAfter)
			}
			if hedges == 0 && tc.params == "" && !pinged && atFreeze.Reads { // with health checks, pings meet the freeze first
				t.Errorf("no read was hedged: the reads in flight on the frozen replica cannot have been answered in time otherwise (at the freeze: %s)", describe(atFreeze))
			}
			if budget := int64(10) + s.ReplicaReads*5/100; hedges > budget {
				t.Errorf("%d hedges for %d replica reads: over the budget of %d", hedges, s.ReplicaReads, budget)
			}

			wctx, cancel := within(ctx, 30*time.Second)
			defer cancel()
			if err := waitFor(wctx, "the thawed replica to serve reads", func() (bool, string) {
				i, err := read(wctx)
				return err == nil && i == frozen, fmt.Sprintf("node %d, %v; %s", i, err, describe(status(t, cn, c, frozen)))
			}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// phaseResult is what readers saw over one phase.
type phaseResult struct {
	lat      []time.Duration
	served   map[int]int
	failed   int
	firstErr error
}

func (r phaseResult) total() int { return len(r.lat) + r.failed }

func (r phaseResult) p99() time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	s := slices.Clone(r.lat)
	slices.Sort(s)
	return s[(len(s)*99)/100]
}

func (r phaseResult) String() string {
	return fmt.Sprintf("%s p99=%v served=%v failed=%d (%v)", durStats(r.lat), r.p99().Round(time.Millisecond), r.served, r.failed, r.firstErr)
}

// frontDoor opens the cluster through the database/sql driver over an
// inner driver ("pgx", "pq") or through the pgx-native handle
// ("pgreplicapgx"), and returns a read that says which node served it.
func frontDoor(t *testing.T, c *integration.Cluster, front string, params ...string) (func(context.Context) (int, error), *pgreplica.Connector) {
	t.Helper()
	if front != "pgreplicapgx" {
		db, cn := open(t, c, append([]string{"pgreplica_driver=" + front}, params...)...)
		return func(ctx context.Context) (int, error) { return servedBy(ctx, db, c) }, cn
	}
	dsn := c.DSN() + "&application_name=" + appName(t)
	for _, p := range params {
		dsn += "&" + p
	}
	pool, err := itest.NewPgx(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return func(ctx context.Context) (int, error) {
		var port int
		if err := pool.QueryRow(ctx, "SELECT inet_server_port()").Scan(&port); err != nil {
			return -1, err
		}
		return c.NodeAt(port), nil
	}, pool.Connector()
}

// readFor runs readers goroutines reading for d, each read with a 1 s
// deadline, and collects their latencies and where they ran.
func readFor(ctx context.Context, read func(context.Context) (int, error), readers int, d time.Duration) phaseResult {
	var mu sync.Mutex
	res := phaseResult{served: map[int]int{}}
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for range readers {
		wg.Go(func() {
			for time.Now().Before(end) && ctx.Err() == nil {
				rctx, cancel := context.WithTimeout(ctx, time.Second)
				start := time.Now()
				i, err := read(rctx)
				took := time.Since(start)
				cancel()
				mu.Lock()
				if err != nil {
					res.failed++
					if res.firstErr == nil {
						res.firstErr = fmt.Errorf("after %v: %w", took.Round(time.Millisecond), err)
					}
				} else {
					res.lat = append(res.lat, took)
					res.served[i]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return res
}
