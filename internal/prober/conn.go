package prober

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/pgreplica/pgreplica/internal/sockpeek"
)

// The probe connection is shared: the prober's loop holds it for each
// probe, and a capture of the primary's position (QueryLSN) borrows it
// between probes instead of keeping a connection of its own; both prefer
// an idle pooled connection (onPooled), and the probe connection is
// closed once those served for ownConnIdle. A process then holds no
// connection on a server beyond what its pools need while they hold one
// there, and one otherwise, whatever it writes and however many handles
// it opened.

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

// connect opens the probe connection and checks what its role may use.
func (p *Prober) connect(ctx context.Context) error {
	p.socks.Reset()
	c, err := p.cfg.Connector.Connect(sockpeek.WithSockets(ctx, &p.socks))
	if err != nil {
		return err
	}
	p.conn, p.connAt = c, time.Now()
	// Grants on functions change rarely: checked once per connection
	// (a failed probe reconnects, and so checks again).
	p.denied, p.user, err = checkPrivileges(ctx, c)
	return err
}

// ownConnIdle is how long the probe connection may go unused while
// pooled connections serve the probes and captures before it is closed:
// a process then holds no connection beyond what its pools need.
const ownConnIdle = 5 * time.Second

// reapOwnConn closes the probe connection once unused for ownConnIdle.
func (p *Prober) reapOwnConn() {
	if time.Since(p.connUsed) > ownConnIdle {
		p.closeConn()
	}
}

// closeConn closes the probe connection, if open, and forgets it.
func (p *Prober) closeConn() {
	if p.conn != nil {
		p.conn.Close()
		p.conn = nil
	}
}

// onPooled runs f on an idle connection a subscriber's pool lends at
// once (Subscriber.LendIdle), within timeout, and gives it back; lent
// reports whether one was lent (none idle: the caller uses the probe
// connection). A statement that wants it meanwhile waits for it when the
// pool has no other idle. Only once the probe connection has read the
// role's privileges (they are the same on every connection of the DSN)
// does a probe go on a pooled one. Like a probe, f is bounded by closing
// the connection's sockets.
func (p *Prober) onPooled(ctx context.Context, timeout time.Duration, f func(context.Context, Lent) error) (lent bool, err error) {
	if p.user == "" {
		return false, nil
	}
	var c Lent
	p.mu.Lock()
	for _, s := range p.subs {
		if c = s.LendIdle(); c != nil {
			break
		}
	}
	p.mu.Unlock()
	if c == nil {
		return false, nil
	}
	qctx, cancel := context.WithTimeout(ctx, timeout)
	stop := context.AfterFunc(qctx, c.CloseSockets)
	err = f(qctx, c)
	if !stop() {
		// Its sockets may be closed: the pool drops it (ErrBadConn).
		if ctx.Err() == nil {
			err = fmt.Errorf("no answer to the probe within %v: %w", timeout, errors.Join(qctx.Err(), driver.ErrBadConn))
		} else {
			err = errors.Join(ctx.Err(), driver.ErrBadConn)
		}
	}
	cancel()
	c.GiveBack(err)
	return true, err
}
