package topologytest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica/integration"
)

// TestFrozenServerDeadlines: with lib/pq, whose cancellation is a request
// the server must read, statements already sent to a server that stopped
// answering still end about a probe timeout after their deadline, not
// when the server wakes: reads with hedging disabled on a frozen replica,
// then an autocommit write on a frozen primary.
func TestFrozenServerDeadlines(t *testing.T) {
	const (
		deadline = 500 * time.Millisecond
		grace    = 300 * time.Millisecond // tuning_probe_timeout
		slack    = time.Second            // scheduling on a loaded machine
		stuck    = 10 * time.Second       // how long the test waits before it calls a statement stuck
	)
	c := startCluster(t, integration.Options{})
	db, _ := open(t, c, "pgreplica_driver=pq", "tuning_hedge_delay=-1s", "pgreplica_consistency=eventual",
		"tuning_probe_timeout=300ms", "pgreplica_zone=near", "pgreplica_zones=p,near,far",
		// No health check before reuse: it would meet the freeze first
		// (and give up on its own), and the statements would never be sent.
		"tuning_health_check_after=-1s")
	ctx := testCtx(t, 2*time.Minute)
	tbl := newTable(t, c)
	if _, err := db.ExecContext(ctx, "INSERT INTO "+tbl+" (seq) VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	// Open connections to the replica in the client's zone, the one to
	// freeze.
	const frozen = 1
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if i, err := servedBy(ctx, db, c); err != nil || i != frozen {
				t.Errorf("warm-up read: node %d, %v; want node %d (its zone)", i, err, frozen)
			}
		})
	}
	wg.Wait()

	// within runs n statements at once with the deadline and reports how
	// long each took, failing t for one still running after stuck.
	within := func(what string, n int, stmt func(context.Context) error) {
		t.Helper()
		type result struct {
			took time.Duration
			err  error
		}
		results := make(chan result, n)
		for range n {
			go func() {
				sctx, cancel := context.WithTimeout(ctx, deadline)
				defer cancel()
				start := time.Now()
				err := stmt(sctx)
				results <- result{time.Since(start), err}
			}()
		}
		limit := deadline + grace + slack
		timer := time.NewTimer(stuck)
		defer timer.Stop()
		for k := range n {
			select {
			case r := <-results:
				t.Logf("%s %d: %v after %v", what, k, r.err, r.took.Round(time.Millisecond))
				if r.took > limit {
					t.Errorf("%s %d took %v, want at most %v (deadline %v + probe timeout %v + slack)", what, k, r.took, limit, deadline, grace)
				}
			case <-timer.C:
				t.Errorf("%s: %d of %d statements still running %v after they were sent (deadline %v)", what, n-k, n, stuck, deadline)
				return
			}
		}
	}

	if err := c.Freeze(frozen); err != nil {
		t.Fatal(err)
	}
	within("read on the frozen replica", 4, func(ctx context.Context) error {
		i, err := servedBy(ctx, db, c)
		if err == nil && i == frozen {
			return fmt.Errorf("served by the frozen node %d", i)
		}
		return err
	})
	if err := c.Thaw(frozen); err != nil {
		t.Fatal(err)
	}

	if err := c.Freeze(c.Primary()); err != nil {
		t.Fatal(err)
	}
	within("write on the frozen primary", 1, func(ctx context.Context) error {
		_, err := db.ExecContext(ctx, "INSERT INTO "+tbl+" (seq) VALUES (2)")
		if err == nil {
			return fmt.Errorf("a write on a frozen primary succeeded")
		}
		return err
	})
	if err := c.Thaw(c.Primary()); err != nil {
		t.Fatal(err)
	}
}
