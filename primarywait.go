package pgreplica

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A primary that refuses connections for a moment — its pooler or proxy
// restarting, a fast restart of the server — is waited for: a statement
// that was never sent is safe to hold, write or read, and sending it when
// the primary answers again is what the caller wanted. The wait lasts
// ConnectTimeout at most, never past the caller's deadline, and asks the
// monitor for a probe every primaryRetry, so the primary is found as soon
// as it answers, whatever the monitor's backoff. It applies only while the
// host last known as the primary is down: a cluster with no primary at all
// (every host a replica, split brain) answers at once.

// primaryRetry is how often a statement waiting for its primary asks the
// monitor to look again.
const primaryRetry = 20 * time.Millisecond

// leasePrimary borrows a connection to the primary, waiting for one that
// is down for a moment (see above), or says why there is none.
func (c *Connector) leasePrimary(ctx context.Context, t *topology, slot bool) (lease, error) {
	l, err := c.tryLeasePrimary(ctx, t, slot)
	if err == nil || !errors.Is(err, ErrNoPrimary) || ctx.Err() != nil || !c.primaryMomentarilyDown(c.topo.Load()) {
		return l, err
	}
	deadline := time.Now().Add(c.cfg.ConnectTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	tick := time.NewTicker(primaryRetry)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		c.mon.pokeAll()
		select {
		case <-ctx.Done():
			return lease{}, fmt.Errorf("%w (while waiting for the primary: %w)", err, ctx.Err())
		case <-tick.C:
		case <-c.mon.changedCh():
		}
		t = c.topo.Load()
		switch {
		case t.primaryNode() != nil:
			l, lerr := c.tryLeasePrimary(ctx, t, slot)
			if lerr == nil || !errors.Is(lerr, ErrNoPrimary) {
				return l, lerr
			}
			err = lerr
		case !c.primaryMomentarilyDown(t):
			return lease{}, t.writeErr
		default:
			err = t.writeErr
		}
	}
	return lease{}, err
}

// primaryMomentarilyDown reports whether the host last known as the
// primary is the one that fails now (its probe failed, or it is suspect),
// with no other host claiming the role.
func (c *Connector) primaryMomentarilyDown(t *topology) bool {
	if t.writeErr != nil && errors.Is(t.writeErr, ErrSplitBrain) {
		return false
	}
	for i := range t.nodes {
		v := &t.nodes[i]
		if v.probed && v.status.role == rolePrimary && (v.status.err != nil || v.n.suspect.Load()) {
			return true
		}
	}
	return false
}
