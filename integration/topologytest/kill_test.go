package topologytest

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration"
)

// TestReplicaKilled: replica 2 is killed (SIGKILL) while three loops read
// without a transaction (eventual, eventual with FallbackError, and the
// connector's default). No read fails, none falls back to the primary while replica 1 is healthy,
// NodeStatus reports the error, and after restart replica 2 serves reads
// again. For both inner drivers, one after the other on one cluster.
func TestReplicaKilled(t *testing.T) {
	c := startCluster(t, integration.Options{})
	for _, inner := range []string{"pgx", "pq"} {
		t.Run(inner, func(t *testing.T) { killReplica(t, c, inner) })
	}
}

// read is one read of a loop: when it returned, where it ran, its error.
type read struct {
	// began is when the read was sent, at when its answer came.
	began, at time.Time
	node      int
	err       error
}

// readLoops reads "SELECT inet_server_port()" through db in one goroutine
// per context until stopped, every 5 ms.
type readLoops struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	reads   map[string][]read
	lastOn  [8]atomic.Int64 // unix ns of the last successful read per node
	started time.Time
}

func startReadLoops(db *sql.DB, c *integration.Cluster, ctxs map[string]context.Context) *readLoops {
	stop, cancel := context.WithCancel(context.Background())
	l := &readLoops{cancel: cancel, reads: map[string][]read{}, started: time.Now()}
	for name, ctx := range ctxs {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for {
				rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				began := time.Now()
				n, err := servedBy(rctx, db, c)
				cancel()
				r := read{began: began, at: time.Now(), node: n, err: err}
				if err == nil && n >= 0 {
					l.lastOn[n].Store(r.at.UnixNano())
				}
				l.mu.Lock()
				l.reads[name] = append(l.reads[name], r)
				l.mu.Unlock()
				select {
				case <-stop.Done():
					return
				case <-tick.C:
				}
			}
		}()
	}
	return l
}

func (l *readLoops) stop() map[string][]read {
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reads
}

// lastRead returns when node i last served a read (zero if never).
func (l *readLoops) lastRead(i int) time.Time {
	if ns := l.lastOn[i].Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

func killReplica(t *testing.T, c *integration.Cluster, inner string) {
	db, cn := open(t, c, "pgreplica_driver="+inner)
	ctx := testCtx(t, 60*time.Second)
	if err := c.WaitStreaming(ctx); err != nil {
		t.Fatal(err)
	}
	awaitCaughtUp(t, ctx, c, cn)
	// Pooled connections to both replicas, so the kill leaves dead ones in
	// the pool for the router to trip over.
	if seen := spread(t, pgreplica.WithEventual(ctx), db, c, 40); seen[1] == 0 || seen[2] == 0 {
		t.Fatalf("warm-up reads went to %v, want both replicas", seen)
	}
	loops := startReadLoops(db, c, map[string]context.Context{
		"eventual":              pgreplica.WithEventual(ctx),
		"eventual_replica_only": pgreplica.WithFallback(pgreplica.WithEventual(ctx), pgreplica.FallbackError),
		"default":               ctx,
	})
	defer loops.stop()
	wctx, cancel := within(ctx, 5*time.Second)
	defer cancel()
	if err := waitFor(wctx, "the read loops to use replica 2", func() (bool, string) {
		return !loops.lastRead(2).IsZero(), "no read on replica 2 yet"
	}); err != nil {
		t.Fatal(err)
	}

	killAt := time.Now()
	if err := c.Kill(2); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	wctx, cancel = within(ctx, 5*time.Second)
	defer cancel()
	if err := waitFor(wctx, "NodeStatus to show replica 2's error", func() (bool, string) {
		ns := status(t, cn, c, 2)
		return ns.Err != nil && !ns.Reads, describe(ns)
	}); err != nil {
		t.Error(err)
	}
	noticed := time.Since(killed)
	t.Logf("%s: replica 2 killed; NodeStatus after %v: %s", inner, noticed.Round(time.Millisecond), describe(status(t, cn, c, 2)))
	// Keep reading on one replica for a while.
	time.Sleep(500 * time.Millisecond)

	if err := c.Start(ctx, 2); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	var readmitted, inPool time.Duration
	wctx, cancel = within(ctx, 10*time.Second)
	defer cancel()
	err := waitFor(wctx, "replica 2 to serve reads again", func() (bool, string) {
		if inPool == 0 && status(t, cn, c, 2).Reads {
			inPool = time.Since(started)
		}
		if last := loops.lastRead(2); last.After(started) {
			readmitted = last.Sub(started)
			return true, ""
		}
		return false, describe(status(t, cn, c, 2))
	})
	reads := loops.stop()
	if err != nil {
		t.Error(err)
	}
	t.Logf("%s: after Start(2) returned, NodeStatus.Reads after %v, first read served by replica 2 after %v",
		inner, inPool.Round(time.Millisecond), readmitted.Round(time.Millisecond))

	for name, rs := range reads {
		var errs []string
		var onPrimary, onDead, total int
		for _, r := range rs {
			if r.at.Before(killAt) {
				continue
			}
			total++
			switch {
			case r.err != nil:
				errs = append(errs, fmt.Sprintf("%v after kill: %v", r.at.Sub(killAt).Round(time.Millisecond), r.err))
			case r.node == 0 && r.at.Before(started.Add(readmitted)):
				onPrimary++
			case r.node == 2 && r.began.After(killed) && r.at.Before(started):
				// Sent once the kill was done: a read answered just before
				// it may be noted a moment after.
				onDead++
			}
		}
		t.Logf("%s/%s: %d reads from the kill on: %d errors, %d on the primary before re-admission",
			inner, name, total, len(errs), onPrimary)
		if len(errs) > 0 {
			t.Errorf("%s reads returned %d errors to the caller during the kill: %v", name, len(errs), head(errs))
		}
		if onPrimary > 0 {
			t.Errorf("%s: %d reads went to the primary although replica 1 was healthy", name, onPrimary)
		}
		if onDead > 0 {
			t.Errorf("%s: %d reads reported served by the dead replica", name, onDead)
		}
	}
	st := cn.Stats()
	t.Logf("%s: Stats: ConnLostRetries=%d Fallbacks=%v FailedReads=%v", inner, st.ConnLostRetries, st.Fallbacks, st.FailedReads)
	// The next subtest starts from a streaming cluster.
	if err := c.WaitStreaming(ctx); err != nil {
		t.Fatal(err)
	}
}
