package pgreplicapgx

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/internal/pgxroute"
)

// Pool routes pgx calls between a primary and its replicas. It is safe
// for concurrent use, like *pgxpool.Pool.
type Pool struct {
	c *pgreplica.Connector
	r pgxroute.Router
	// started is set once the monitor answered (see ready).
	started atomic.Bool
	// slab holds the rows of the next queries (rowsslab.go).
	slab atomic.Pointer[rowsSlab]
}

// New parses a pgreplica DSN (see ParseConfig) and returns a Pool. Like
// pgxpool.New it does not connect: the first call (or Ping) discovers
// the roles of the hosts.
func New(ctx context.Context, dsn string) (*Pool, error) {
	rc, err := parseRouting(dsn)
	if err != nil {
		return nil, err
	}
	// No ConnConfig: each server's is parsed from the DSN, as the
	// driver's are, so that the handle shares the monitor's connections
	// with a *sql.DB on the same DSN (see pgreplica.PgxHooks).
	cfg := &Config{Routing: rc}
	cfg.takePoolSettings()
	return NewWithConfig(ctx, cfg)
}

// NewWithConfig returns a Pool for cfg (see ParseConfig), as
// pgxpool.NewWithConfig does. The handle talks pgx's protocol, so the
// inner driver is pgx: cfg.Routing.Driver must be empty or
// pgreplica.DriverPgx. Like pgxpool.NewWithConfig it does not connect.
func NewWithConfig(_ context.Context, cfg *Config) (*Pool, error) {
	if cfg == nil {
		return nil, fmt.Errorf("%w: NewWithConfig needs a Config (from ParseConfig)", pgreplica.ErrBadConfig)
	}
	rc, err := cfg.routing()
	if err != nil {
		return nil, err
	}
	switch rc.Driver {
	case "", pgreplica.DriverPgx:
		rc.Driver = pgreplica.DriverPgx
	default:
		return nil, fmt.Errorf("%w: pgreplicapgx needs the pgx inner driver, not %q", pgreplica.ErrBadConfig, rc.Driver)
	}
	c, err := pgreplica.NewConnector(rc)
	if err != nil {
		return nil, err
	}
	r, ok := pgxroute.For(c)
	if !ok {
		c.Close()
		return nil, errors.New("pgreplicapgx: the connector has no pgx router")
	}
	return &Pool{c: c, r: r}, nil
}

// Connector returns the pgreplica connector under the pool: its Stats,
// Nodes and status, for pgreplicaprom and the status tools.
func (p *Pool) Connector() *pgreplica.Connector { return p.c }

// Stat returns the routing counters and the status of every host, as
// (*pgreplica.Connector).Stats.
func (p *Pool) Stat() pgreplica.Stats { return p.c.Stats() }

// Close stops the monitor and closes every connection (see
// (*pgreplica.Connector).Close).
func (p *Pool) Close() { p.c.Close() }

// ready starts the monitor on the first call and waits for its first
// round, so that a cluster nobody can reach is reported as in the driver
// (errors.Is(err, pgreplica.ErrNoReachableHost)).
func (p *Pool) ready(ctx context.Context) error {
	if p.started.Load() {
		return nil
	}
	if err := p.r.Start(ctx); err != nil {
		return err
	}
	p.started.Store(true)
	return nil
}

// route starts the pool if needed, then routes req to run op.
func (p *Pool) route(ctx context.Context, req pgxroute.Request, op func(*pgx.Conn) error) (pgxroute.Lease, error) {
	return p.routeOp(ctx, req, pgxroute.OpFunc(op))
}

func (p *Pool) routeOp(ctx context.Context, req pgxroute.Request, op pgxroute.Op) (pgxroute.Lease, error) {
	if err := p.ready(ctx); err != nil {
		return pgxroute.Lease{}, err
	}
	return p.r.Route(ctx, req, op)
}

// Ping checks that the primary answers, or says why there is none
// (pgreplica.ErrNoPrimary, ErrSplitBrain, ErrNoReachableHost,
// ErrInsufficientPrivilege), as the driver's Ping.
func (p *Pool) Ping(ctx context.Context) error {
	l, err := p.route(ctx, pgxroute.Request{Kind: pgxroute.Ping}, func(c *pgx.Conn) error { return c.Ping(ctx) })
	if err != nil {
		return err
	}
	l.Done(nil)
	return nil
}

// Exec runs a statement on the primary: Exec returns no rows, so a read
// sent through it gains nothing from a replica. A write's position is
// recorded without a statement (read later, shared). A statement that
// changes session state (SET, LISTEN, temporary tables) changes one
// pooled connection, which is then closed rather than reused: hold such
// state on a connection from Acquire.
func (p *Pool) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	var tag pgconn.CommandTag
	l, err := p.route(ctx, pgxroute.Request{Kind: pgxroute.Exec, SQL: sql}, func(c *pgx.Conn) (err error) {
		tag, err = c.Exec(ctx, sql, args...)
		return err
	})
	if err != nil {
		return tag, err
	}
	l.Done(nil)
	return tag, nil
}

// Query runs a query on a replica that satisfies the context's
// requirement when it is a provable read, else on the primary. The
// connection goes back when the rows are closed (or read to the end); a
// write through Query (INSERT … RETURNING) is recorded then.
func (p *Pool) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	r, err := p.query(ctx, sql, args)
	if err != nil {
		return errRows{err}, err
	}
	return r, nil
}

// query routes a query; its rows are the operation that runs it.
func (p *Pool) query(ctx context.Context, sql string, args []any) (*rows, error) {
	r := p.newRows()
	r.ctx, r.sql, r.args = ctx, sql, args
	l, err := p.routeOp(ctx, pgxroute.Request{Kind: pgxroute.Query, SQL: sql, Guarded: r, Hedge: r}, r)
	if err != nil {
		return nil, err
	}
	r.lease = l
	return r, nil
}

// QueryRow is Query for at most one row: Scan returns pgx.ErrNoRows when
// there is none.
func (p *Pool) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	r, err := p.query(ctx, sql, args)
	if err != nil {
		return errRow{err}
	}
	return (*row)(r)
}
