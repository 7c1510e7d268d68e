package integration

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Exec runs sql on node i alone, over a connection of its own, as the
// superuser. Without args, sql may hold several statements separated by
// semicolons.
func (c *Cluster) Exec(ctx context.Context, i int, sql string, args ...any) error {
	conn, err := c.connect(ctx, i)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("integration: node %d: %s: %w", i, sql, err)
	}
	return nil
}

// QueryString runs a query on node i alone and returns the first column of
// its first row in PostgreSQL's text form ("t" for true, "0/3000148" for an
// LSN); NULL yields "". A query that returns no row fails with an error
// wrapping pgx.ErrNoRows.
func (c *Cluster) QueryString(ctx context.Context, i int, sql string, args ...any) (string, error) {
	conn, err := c.connect(ctx, i)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	return queryString(ctx, conn, sql, args...)
}

func queryString(ctx context.Context, conn *pgx.Conn, sql string, args ...any) (string, error) {
	// The simple protocol returns every type in text form.
	var s *string
	err := conn.QueryRow(ctx, sql, append([]any{pgx.QueryExecModeSimpleProtocol}, args...)...).Scan(&s)
	if err != nil {
		return "", fmt.Errorf("integration: %s: %w", sql, err)
	}
	if s == nil {
		return "", nil
	}
	return *s, nil
}

// connect opens a connection to node i.
func (c *Cluster) connect(ctx context.Context, i int) (*pgx.Conn, error) {
	if _, err := c.node(i); err != nil {
		return nil, err
	}
	cfg, err := pgx.ParseConfig(c.NodeDSN(i))
	if err != nil {
		return nil, fmt.Errorf("integration: %w", err)
	}
	cfg.RuntimeParams["application_name"] = "pgreplica-integration"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("integration: connecting to node %d: %w", i, err)
	}
	return conn, nil
}

// pollInterval is how often waits re-check their condition.
const pollInterval = 10 * time.Millisecond

// attemptTimeout bounds one connection attempt or query inside a wait, so
// that a hung server cannot stall the wait past its own deadline.
const attemptTimeout = 2 * time.Second

// poll calls check every pollInterval until it reports done, fails, or ctx
// ends. check reports transient trouble (a server still starting, a
// condition not met yet) through status, which the timeout error quotes.
func poll(ctx context.Context, what string, check func(ctx context.Context) (done bool, status string, err error)) error {
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	var last string
	for {
		done, status, err := check(ctx)
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		if status != "" {
			last = status
		}
		select {
		case <-ctx.Done():
			if last != "" {
				return fmt.Errorf("integration: waiting for %s: %w (last: %s)", what, context.Cause(ctx), last)
			}
			return fmt.Errorf("integration: waiting for %s: %w", what, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// conns keeps one connection per node across the rounds of a wait,
// reconnecting after any error.
type conns struct {
	c *Cluster
	m map[int]*pgx.Conn
}

func (c *Cluster) newConns() *conns { return &conns{c: c, m: map[int]*pgx.Conn{}} }

// queryString runs queryString on node i.
func (cs *conns) queryString(ctx context.Context, i int, sql string, args ...any) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	conn := cs.m[i]
	if conn == nil {
		var err error
		if conn, err = cs.c.connect(ctx, i); err != nil {
			return "", err
		}
		cs.m[i] = conn
	}
	s, err := queryString(ctx, conn, sql, args...)
	if err != nil {
		conn.Close(context.Background())
		delete(cs.m, i)
	}
	return s, err
}

func (cs *conns) close() {
	for i, conn := range cs.m {
		conn.Close(context.Background())
		delete(cs.m, i)
	}
}

// transient reports whether a wait should retry after err: connection
// trouble and a server starting or shutting down are transient, an error
// the server raised about the statement itself is not.
func transient(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || len(pgErr.Code) < 2 {
		return true
	}
	switch pgErr.Code[:2] {
	case "08", "57": // connection exception, operator intervention
		return true
	}
	return false
}
