package pgreplica

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The probe connection is shared: the prober's loop holds it for each
// probe, and a capture of the primary's position (capture.go) borrows
// it between probes instead of keeping a connection of its own. A
// process then holds one connection on each server beyond what its pools
// need, whatever it writes and however many handles it opened.

// connLock is a mutex a waiter can give up on when its context ends.
type connLock chan struct{}

func newConnLock() connLock { return make(connLock, 1) }

func (l connLock) lock(ctx context.Context) error {
	select {
	case l <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l connLock) unlock() { <-l }

// errNoProbeConn: the node has no open probe connection to lend (before
// its first probe, after a failed one, or after Close).
var errNoProbeConn = errors.New("pgreplica: no probe connection open")

// queryLSN runs query, which returns one position, on the probe
// connection, and returns the position with when the server
// read it (a lag-tracker sample, as a probe's). It waits for a probe under way, and gives the
// query the probe timeout: a primary that does not answer a one-value
// SELECT in that time would fail its next probe too, and the monitor must
// not wait longer than a probe's time to send one. Such a timeout counts
// as a failed probe (probeOnce reports it): a frozen primary is marked
// down as soon as if a probe had found it.
func (p *prober) queryLSN(ctx context.Context, query string, timeout time.Duration) (lsn LSN, at time.Time, err error) {
	if err := p.lock.lock(ctx); err != nil {
		return 0, time.Time{}, err
	}
	defer p.lock.unlock()
	if p.conn == nil {
		return 0, time.Time{}, errNoProbeConn
	}
	qctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// As for a probe: closing the socket is the one way to stop lib/pq
	// waiting for a server that answers nothing.
	stop := context.AfterFunc(qctx, func() { p.socks.close() })
	start := time.Now()
	lsn, err = queryLSN(qctx, p.conn, query)
	if stop() && err == nil {
		// Read by the server about half a round trip before the
		// answer arrived, as for a probe.
		at = start.Add(time.Since(start) / 2)
		p.capturedAt.Store(at.UnixNano())
		return lsn, at, nil
	}
	p.conn.Close()
	p.conn = nil
	if ctx.Err() == nil && qctx.Err() != nil {
		err = fmt.Errorf("no answer within %v to a read of the primary's position: %w", timeout, qctx.Err())
		p.failed = err
	}
	p.poke()
	return 0, time.Time{}, err
}
