// Package pgreplica is a database/sql driver that sits in front of a
// PostgreSQL primary and its streaming read replicas. It routes every
// statement: writes to the primary, provable reads to a replica that is
// fresh enough for the caller's consistency requirement.
//
//	db, err := sql.Open("pgreplica", "postgres://app@db1,db2,db3/shop?sslmode=disable")
//
// Roles are discovered (pg_is_in_recovery), never configured. Each
// statement borrows a physical connection from the chosen host's pool; the
// connections database/sql pools are virtual and hold no socket.
package pgreplica

import (
	"context"
	"database/sql"
	"database/sql/driver"
)

// DriverName is the name pgreplica registers with database/sql.
const DriverName = "pgreplica"

func init() {
	sql.Register(DriverName, Driver{})
}

// Driver is the database/sql driver. It implements driver.DriverContext, so
// database/sql parses the DSN once per sql.DB rather than once per
// connection.
//
// The Driver a *Connector returns knows that connector: database/sql's
// (*sql.DB).Driver() returns connector.Driver() (sql.Open calls
// OpenConnector for a DriverContext driver, sql.OpenDB keeps the connector
// it is given), which is how ConnectorOf finds the connector without a
// connection.
type Driver struct {
	c *Connector
}

var (
	_ driver.Driver        = Driver{}
	_ driver.DriverContext = Driver{}
)

// Open parses dsn and opens one virtual connection on a connector of its
// own. database/sql uses OpenConnector instead; Open exists for callers that
// use the driver directly, and closing the returned conn releases the
// connector.
func (d Driver) Open(dsn string) (driver.Conn, error) {
	c, err := d.OpenConnector(dsn)
	if err != nil {
		return nil, err
	}
	cn, err := c.Connect(context.Background())
	if err != nil {
		c.(*Connector).Close()
		return nil, err
	}
	cn.(*conn).ownsConnector = true
	return cn, nil
}

// OpenConnector parses dsn (see ParseDSN) and returns a *Connector.
func (Driver) OpenConnector(dsn string) (driver.Connector, error) {
	cfg, err := ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	return NewConnector(cfg)
}
