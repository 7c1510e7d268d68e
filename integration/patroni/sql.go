//go:build linux

package patroni

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// sqlTimeout bounds one admin connection and query: a frozen server
// accepts connections and answers nothing.
const sqlTimeout = 2 * time.Second

// connect opens an admin connection to member i.
func (c *Cluster) connect(ctx context.Context, i int) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(c.MemberDSN(i) + "&connect_timeout=2")
	if err != nil {
		return nil, err
	}
	cfg.RuntimeParams["application_name"] = "pgreplica-patroni-harness"
	return pgx.ConnectConfig(ctx, cfg)
}

// Exec runs admin SQL on member i.
func (c *Cluster) Exec(ctx context.Context, i int, sql string, args ...any) error {
	ctx, cancel := context.WithTimeout(ctx, sqlTimeout)
	defer cancel()
	conn, err := c.connect(ctx, i)
	if err != nil {
		return fmt.Errorf("patroni: m%d: %w", i, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("patroni: m%d: %w", i, err)
	}
	return nil
}

// QueryString runs a one-value query on member i and returns the value in
// PostgreSQL's text form ("" for NULL).
func (c *Cluster) QueryString(ctx context.Context, i int, sql string, args ...any) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, sqlTimeout)
	defer cancel()
	conn, err := c.connect(ctx, i)
	if err != nil {
		return "", fmt.Errorf("patroni: m%d: %w", i, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var v *string
	if err := conn.QueryRow(ctx, "SELECT ("+sql+")::text", args...).Scan(&v); err != nil {
		return "", fmt.Errorf("patroni: m%d: %w", i, err)
	}
	if v == nil {
		return "", nil
	}
	return *v, nil
}
