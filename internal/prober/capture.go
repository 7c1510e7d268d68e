package prober

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pgreplica/pgreplica/internal/inner"
	"github.com/pgreplica/pgreplica/internal/sqlstate"
)

// ErrNoConn: the prober has no open probe connection to lend (before its
// first probe, after a failed one, or once stopped).
var ErrNoConn = errors.New("pgreplica: no probe connection open")

// QueryLSN runs query, which returns one position, on an idle pooled
// connection or the probe connection, and returns the position with when
// the server read it (a lag-tracker sample, as a probe's). It waits for
// a probe under way, and gives the query timeout (the probe timeout): a
// primary that does not answer a one-value SELECT in that time would fail
// its next probe too, and the monitor must not wait longer than a probe's
// time to send one. Such a timeout counts as a failed probe (probeOnce
// reports it): a frozen primary is marked down as soon as if a probe had
// found it.
func (p *Prober) QueryLSN(ctx context.Context, query string, timeout time.Duration) (lsn uint64, at time.Time, err error) {
	if err := p.lock.lock(ctx); err != nil {
		return 0, time.Time{}, err
	}
	defer p.lock.unlock()
	if p.failed == nil {
		start := time.Now()
		lent, err := p.onPooled(ctx, timeout, func(ctx context.Context, c Lent) error {
			var err error
			lsn, err = inner.QueryLSN(ctx, c.Conn(), query)
			return err
		})
		switch {
		case lent && err == nil:
			at = start.Add(time.Since(start) / 2) // as below
			p.capturedAt.Store(at.UnixNano())
			return lsn, at, nil
		case lent && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
			p.failed = err // as below
			p.Poke()
			return 0, time.Time{}, err
		case lent && (!sqlstate.ConnLost(err) || ctx.Err() != nil):
			return 0, time.Time{}, err
		} // else none idle, or it died: the probe connection's turn
	}
	if p.conn == nil {
		return 0, time.Time{}, ErrNoConn
	}
	p.connUsed = time.Now()
	qctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// As for a probe: closing the socket is the one way to stop lib/pq
	// waiting for a server that answers nothing.
	stop := context.AfterFunc(qctx, func() { p.socks.Close() })
	start := time.Now()
	lsn, err = inner.QueryLSN(qctx, p.conn, query)
	if stop() && err == nil {
		// Read by the server about half a round trip before the
		// answer arrived, as for a probe.
		at = start.Add(time.Since(start) / 2)
		p.capturedAt.Store(at.UnixNano())
		return lsn, at, nil
	}
	p.closeConn()
	if ctx.Err() == nil && qctx.Err() != nil {
		err = fmt.Errorf("no answer within %v to a read of the primary's position: %w", timeout, qctx.Err())
		p.failed = err
	}
	p.Poke()
	return 0, time.Time{}, err
}
