package faulttest

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration"
)

// markDownBound is how long the monitor may take to mark a black-holed
// host down with pgreplica_connect_timeout=1s: the probe in flight waits
// out its 1 s timeout; the rest is a probe interval (250 ms) and the
// scheduling of a loaded 2-core machine, given a wide margin.
const markDownBound = 5 * time.Second

// TestPartition: replica 1's link is black-holed (nothing goes through
// either way, nothing is closed: a partition, and every open connection
// half-open). No read with a 1 s deadline fails: those sent to replica 1
// before the monitor noticed are hedged to replica 2. The monitor marks
// it down within markDownBound; after Heal
// replica 1 comes back and serves reads again.
func TestPartition(t *testing.T) {
	f := setup(t, 1, "pgreplica_connect_timeout=1s")
	ctx := testCtx(t, 3*time.Minute)

	// Both replicas serve (round robin, in turns of 16 reads while they
	// are idle), so the pool holds connections to replica 1 that the
	// partition leaves half-open.
	seen := f.reads(ctx, 40, time.Second)
	if seen[1] == 0 || seen[2] == 0 {
		t.Fatalf("before the partition 40 reads went to %v, want both replicas", seen)
	}

	if err := f.p.Blackhole(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// Reads go on meanwhile: nothing answers those sent to replica 1
	// before the monitor noticed (a half-open connection), and they are
	// hedged to replica 2 after the hedge delay.
	var during, failedDuring atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		f.readUntil(ctx, stop, func(_ int, err error) {
			during.Add(1)
			if err != nil {
				failedDuring.Add(1)
			}
		})
	})
	down := f.await(ctx, markDownBound, "the monitor to mark replica 1 down", func() (bool, string) {
		ns := f.status(1)
		return ns.Err != nil && !ns.Reads, describe(ns)
	})
	close(stop)
	wg.Wait()
	t.Logf("black-holed replica 1 marked down after %v (%s); meanwhile %d of %d reads failed at their 1 s deadline",
		down.Round(time.Millisecond), f.status(1).Why, failedDuring.Load(), during.Load())
	if n := failedDuring.Load(); n > 0 {
		t.Errorf("%d of %d reads failed before the partitioned replica was marked down: they should have been hedged", n, during.Load())
	}

	seen = f.reads(ctx, 100, time.Second)
	if seen[1] > 0 || seen[2] != 100 {
		t.Errorf("with replica 1 down 100 reads went to %v, want all on replica 2", seen)
	}
	t.Logf("partitioned for %v", time.Since(start).Round(time.Millisecond))

	if err := f.p.Heal(); err != nil {
		t.Fatal(err)
	}
	back := f.await(ctx, 20*time.Second, "replica 1 to come back", func() (bool, string) {
		ns := f.status(1)
		return ns.Err == nil && ns.Reads, describe(ns)
	})
	t.Logf("replica 1 back %v after Heal", back.Round(time.Millisecond))
	// Connections that lived through the partition were closed by Heal:
	// reads find that out and retry, none fails.
	seen = f.reads(ctx, 40, time.Second)
	if seen[1] == 0 {
		t.Errorf("after Heal 40 reads went to %v, want some on replica 1 again", seen)
	}
}

// TestReset: replica 1's link resets every connection (TCP RST) the
// moment a result comes back through it, under four concurrent readers.
// No read with a 1 s deadline fails: a read that lost its connection is
// sent again to replica 2. After Heal replica 1 serves again; once the
// DB is closed, no connection is left on any server or in the proxy, and
// no goroutine is left behind.
func TestReset(t *testing.T) {
	cluster.Need(t)
	before := runtime.NumGoroutine()
	f := setup(t, 1)
	ctx := testCtx(t, 3*time.Minute)

	var reads, failed atomic.Int64
	var firstErr atomic.Value
	byNode := make([]atomic.Int64, cluster.Len())
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			f.readUntil(ctx, stop, func(n int, err error) {
				reads.Add(1)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
					return
				}
				byNode[n].Add(1)
			})
		})
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()
	f.await(ctx, 30*time.Second, "reads on both replicas", func() (bool, string) {
		return byNode[1].Load() > 10 && byNode[2].Load() > 10, ""
	})

	retriesBefore := f.cn.Stats().ConnLostRetries
	if err := f.p.Reset(integration.ToClient); err != nil {
		t.Fatal(err)
	}
	down := f.await(ctx, markDownBound, "the monitor to mark replica 1 down", func() (bool, string) {
		ns := f.status(1)
		return ns.Err != nil, describe(ns)
	})
	at := reads.Load()
	f.await(ctx, 30*time.Second, "100 more reads", func() (bool, string) { return reads.Load() > at+100, "" })
	if err := f.p.Heal(); err != nil {
		t.Fatal(err)
	}
	on1 := byNode[1].Load()
	back := f.await(ctx, 20*time.Second, "replica 1 to serve reads again", func() (bool, string) {
		return byNode[1].Load() > on1+10, describe(f.status(1))
	})
	close(stop)
	wg.Wait()
	retries := f.cn.Stats().ConnLostRetries - retriesBefore
	t.Logf("reset: replica 1 marked down after %v, serving again %v after Heal; %d reads (%d on replica 1, %d on replica 2), %d failed, %d retried after a lost connection",
		down.Round(time.Millisecond), back.Round(time.Millisecond), reads.Load(), byNode[1].Load(), byNode[2].Load(), failed.Load(), retries)
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d reads with a 1 s deadline failed, first: %v", n, reads.Load(), firstErr.Load())
	}

	// Nothing left behind.
	if err := f.db.Close(); err != nil {
		t.Fatal(err)
	}
	f.await(ctx, 10*time.Second, "no server session and no proxied connection left", func() (bool, string) {
		for i := range cluster.Len() {
			n, err := cluster.QueryString(ctx, i, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", f.app)
			if err != nil || n != "0" {
				return false, fmt.Sprintf("node %d: %s sessions (%v)", i, n, err)
			}
		}
		return f.p.Conns() == 0, "proxy connections open"
	})
	if err := f.p.Close(); err != nil {
		t.Fatal(err)
	}
	f.await(ctx, 10*time.Second, "the goroutines to end", func() (bool, string) {
		n := runtime.NumGoroutine()
		return n <= before, fmt.Sprintf("%d goroutines, %d before", n, before)
	})
}

// reads runs n eventual reads one after the other, each with its own
// deadline, fails the test on any error and counts them by serving node.
func (f *fixture) reads(ctx context.Context, n int, deadline time.Duration) map[int]int {
	f.t.Helper()
	seen := map[int]int{}
	for range n {
		rctx, cancel := context.WithTimeout(pgreplica.WithEventual(ctx), deadline)
		node, err := servedBy(rctx, f.db)
		cancel()
		if err != nil {
			f.t.Fatalf("read with a %v deadline: %v; statuses: %s", deadline, err, f.statuses())
		}
		seen[node]++
	}
	return seen
}

// readUntil runs eventual reads with a 1 s deadline each, one after the
// other, until stop is closed, and tells done which node served each (or
// its error).
func (f *fixture) readUntil(ctx context.Context, stop <-chan struct{}, done func(node int, err error)) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		rctx, cancel := context.WithTimeout(pgreplica.WithEventual(ctx), time.Second)
		n, err := servedBy(rctx, f.db)
		cancel()
		done(n, err)
	}
}
