package pgreplica

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/puddle/v2"
)

// physical is one server connection of the inner driver.
type physical struct {
	conn driver.Conn
	node *node
	// dirty is set when a statement changed session state (SET, temp
	// tables, LISTEN, ...): the connection is closed rather than reused.
	dirty bool
	// asyncCommit is set once this session may commit asynchronously
	// (synchronous_commit changed), which changes how a write's LSN is read.
	asyncCommit bool
	// wire is what the router needs beyond database/sql's interfaces.
	wire wire
}

// note records what a statement about to run does to the session of p.
func (p *physical) note(cls stmtClass) {
	if cls.sessionState {
		p.dirty = true
	}
	if cls.asyncCommit {
		p.asyncCommit = true
	}
}

// hostPool is the bounded pool of physical connections to one host.
// puddle (the pool under pgxpool) does the bookkeeping; this type adds the
// database/sql-style policies: max lifetime, idle timeout and a health check
// before reusing a connection that sat idle.
type hostPool struct {
	node             *node
	pool             *puddle.Pool[*physical]
	maxLifetime      time.Duration
	maxIdle          time.Duration
	healthCheckAfter time.Duration
}

func newHostPool(n *node, inner driver.Connector, cfg *Config) (*hostPool, error) {
	hp := &hostPool{
		node:             n,
		maxLifetime:      cfg.ConnMaxLifetime,
		maxIdle:          cfg.ConnMaxIdleTime,
		healthCheckAfter: cfg.HealthCheckAfter,
	}
	timeout := cfg.ConnectTimeout
	p, err := puddle.NewPool(&puddle.Config[*physical]{
		Constructor: func(ctx context.Context) (*physical, error) {
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			c, err := inner.Connect(ctx)
			if err != nil {
				return nil, err
			}
			return &physical{conn: c, node: n, wire: newWire(c)}, nil
		},
		Destructor: func(p *physical) { p.conn.Close() },
		MaxSize:    int32(cfg.MaxConnsPerHost),
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadConfig, err)
	}
	hp.pool = p
	return hp, nil
}

// acquire returns a healthy physical connection, replacing stale ones.
func (hp *hostPool) acquire(ctx context.Context) (*puddle.Resource[*physical], error) {
	for {
		res, err := hp.pool.Acquire(ctx)
		if err != nil {
			if errors.Is(err, puddle.ErrClosedPool) {
				return nil, ErrClosed
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			hp.node.markSuspect()
			return nil, fmt.Errorf("pgreplica: connect to %s: %w", hp.node.name, err)
		}
		if hp.usable(ctx, res) {
			return res, nil
		}
		res.Destroy()
	}
}

func (hp *hostPool) usable(ctx context.Context, res *puddle.Resource[*physical]) bool {
	if hp.maxLifetime > 0 && time.Since(res.CreationTime()) > hp.maxLifetime {
		return false
	}
	c := res.Value().conn
	if v, ok := c.(driver.Validator); ok && !v.IsValid() {
		return false
	}
	if hp.healthCheckAfter >= 0 && res.IdleDuration() > hp.healthCheckAfter {
		if p, ok := c.(driver.Pinger); ok && p.Ping(ctx) != nil {
			return false
		}
	}
	return true
}

// release gives a connection back. A connection that failed in a way that
// leaves it unusable, or that carries session state, is closed.
func (hp *hostPool) release(res *puddle.Resource[*physical], err error) {
	p := res.Value()
	if serverGone(err) {
		// The server went away or cut us off (a restart, a failover, a
		// network fault): its idle siblings are most likely dead too and
		// would each fail one more statement.
		res.Destroy()
		hp.pool.Reset()
		return
	}
	if errors.Is(err, driver.ErrBadConn) || isConnLost(err) {
		res.Destroy()
		return
	}
	if v, ok := p.conn.(driver.Validator); ok && !v.IsValid() {
		res.Destroy()
		return
	}
	if p.dirty {
		// DISCARD ALL would also deallocate the statements the inner driver
		// cached on this connection (pgx would then fail on them), so a
		// connection with session state is closed instead: session state
		// is rare, a reconnect is cheap next to leaking a search_path.
		res.Destroy()
		return
	}
	res.Release()
}

// reap closes connections idle or alive too long. The monitor calls it.
func (hp *hostPool) reap() {
	for _, res := range hp.pool.AcquireAllIdle() {
		expired := hp.maxLifetime > 0 && time.Since(res.CreationTime()) > hp.maxLifetime
		idle := hp.maxIdle > 0 && res.IdleDuration() > hp.maxIdle
		if expired || idle {
			res.Destroy()
		} else {
			res.ReleaseUnused()
		}
	}
}

func (hp *hostPool) close() { hp.pool.Close() }
