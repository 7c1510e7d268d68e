package pgreplica

// ConnectorOf: from a *sql.DB back to its *Connector, through the wrappers
// that say what they wrap.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
)

// ConnectorOf returns the *Connector behind a *sql.DB, for Nodes and Stats.
// It opens no connection where it can avoid it, so it works with every host
// down (when an operator most wants Nodes) and with the pool exhausted:
//
//   - sql.Open("pgreplica", dsn) and sql.OpenDB(connector): database/sql's
//     (*sql.DB).Driver() returns the connector's Driver, which knows it.
//   - A wrapping driver (instrumentation, middleware) whose driver.Driver
//     has an Unwrap() driver.Driver method returning the driver it wraps,
//     at any depth.
//   - Otherwise ConnectorOf borrows a connection (waiting as ctx allows) and
//     looks through conns that expose the conn they wrap: Raw()
//     driver.Conn (XSAM/otelsql), Raw() any or Unwrap() driver.Conn. This
//     needs a reachable cluster and a free conn. Wrappers that expose
//     neither (ngrok/sqlmw keeps its parent unexported) cannot be seen
//     through.
//
// The way that always works is to keep the connector you made:
// c, err := NewConnector(cfg) (or ParseDSN then NewConnector), then
// sql.OpenDB(c) or sql.OpenDB(wrapper(c)), and use c.
func ConnectorOf(ctx context.Context, db *sql.DB) (*Connector, error) {
	if c := connectorOfDriver(db.Driver()); c != nil {
		return c, nil
	}
	cn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgreplica: ConnectorOf: driver %T does not reveal its connector, and no connection to look through: %w", db.Driver(), err)
	}
	defer cn.Close()
	var c *Connector
	err = cn.Raw(func(dc any) error {
		for range maxUnwrap {
			if v, ok := dc.(*conn); ok {
				c = v.c
				return nil
			}
			if dc = unwrapConn(dc); dc == nil {
				break
			}
		}
		return errNotPgreplica
	})
	return c, err
}

// maxUnwrap bounds how many wrappers ConnectorOf looks through (a wrapper
// that returns itself must not loop forever).
const maxUnwrap = 16

// connectorOfDriver finds the connector of a Driver that a *Connector
// returned, through wrappers with Unwrap() driver.Driver; nil if none.
func connectorOfDriver(d driver.Driver) *Connector {
	for range maxUnwrap {
		switch v := d.(type) {
		case Driver:
			return v.c
		case *Driver:
			if v == nil {
				return nil
			}
			return v.c
		case interface{ Unwrap() driver.Driver }:
			d = v.Unwrap()
		default:
			return nil
		}
	}
	return nil
}

// unwrapConn returns the conn a wrapping conn exposes, or nil.
func unwrapConn(c any) any {
	switch v := c.(type) {
	case interface{ Raw() driver.Conn }:
		return v.Raw()
	case interface{ Raw() any }:
		return v.Raw()
	case interface{ Unwrap() driver.Conn }:
		return v.Unwrap()
	}
	return nil
}

var errNotPgreplica = errors.New("pgreplica: the *sql.DB does not use the pgreplica driver")
