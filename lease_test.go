package pgreplica

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica/internal/prober"
)

// TestAwaitPrimaryProbesOnAClock: a write that waits for a primary asks
// the monitor to look on a clock (primaryRetry, doubling up to
// maxPrimaryRetry), not after each of its rebuilds: asking again after
// each answer probed every server back to back for as long as the wait
// lasted (about ten thousand probes in a 300 ms pooler outage, which
// starved the dials that would have ended it).
func TestAwaitPrimaryProbesOnAClock(t *testing.T) {
	mc := newMockCluster(t, 2, nil)
	var probes atomic.Int64
	standIn := mc.c.probe
	mc.c.probe = func(ctx context.Context, n *node) *prober.Status {
		probes.Add(1)
		return standIn(ctx, n)
	}
	mc.refresh() // the handle knows a primary
	mc.set(0, roleReplica, 0x100)
	mc.refresh() // and now has none: a failover's window

	const wait = 400 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	before := probes.Load()
	start := time.Now()
	_, err := mc.db.ExecContext(ctx, "INSERT INTO t VALUES (1)")
	if !errors.Is(err, ErrNoPrimary) {
		t.Fatalf("write with no primary: %v, want ErrNoPrimary", err)
	}
	if took := time.Since(start); took < wait*9/10 {
		t.Errorf("the write returned after %v, before its deadline (%v): it did not wait for a primary", took, wait)
	}
	// 20, 40, 80, 160, 160 ms: six asks in 400 ms, each probing three
	// nodes; a little room for the monitor's own.
	if n := probes.Load() - before; n > 3*10 {
		t.Errorf("%d probes while one write waited %v for a primary, want at most %d", n, wait, 3*10)
	} else {
		t.Logf("%d probes while one write waited %v for a primary", n, wait)
	}
}
