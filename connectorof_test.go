package pgreplica

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"
)

// closedPorts returns n local TCP ports nothing listens on.
func closedPorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
		l.Close()
	}
	return ports
}

// TestConnectorOfWithEveryHostDown: an operator wants Nodes() most when
// nothing answers, so ConnectorOf opens no connection.
func TestConnectorOfWithEveryHostDown(t *testing.T) {
	p := closedPorts(t, 2)
	db, err := sql.Open(DriverName, fmt.Sprintf("postgres://app@127.0.0.1:%d,127.0.0.1:%d/shop?sslmode=disable&pgreplica_connect_timeout=200ms", p[0], p[1]))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Ping(); !errors.Is(err, ErrNoReachableHost) {
		t.Fatalf("Ping = %v, want ErrNoReachableHost", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := ConnectorOf(ctx, db)
	if err != nil {
		t.Fatalf("ConnectorOf with every host down: %v", err)
	}
	if n := c.Nodes(); len(n) != 2 || n[0].Err == nil {
		t.Fatalf("Nodes() = %+v, want two hosts reporting their error", n)
	}

	// The same through sql.OpenDB.
	c2, err := NewConnector(Config{Hosts: []Host{{Addr: "127.0.0.1", Port: uint16(p[0])}}, User: "app"})
	if err != nil {
		t.Fatal(err)
	}
	db2 := sql.OpenDB(c2)
	defer db2.Close()
	if got, err := ConnectorOf(ctx, db2); got != c2 || err != nil {
		t.Fatalf("ConnectorOf(OpenDB(c)) = %p, %v; want %p", got, err, c2)
	}
}

// TestConnectorOfWithPoolExhausted: ConnectorOf does not queue behind a
// busy pool.
func TestConnectorOfWithPoolExhausted(t *testing.T) {
	mc := newMockCluster(t, 1, nil)
	mc.db.SetMaxOpenConns(1)
	held, err := mc.db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if got, err := ConnectorOf(ctx, mc.db); got != mc.c || err != nil {
		t.Fatalf("ConnectorOf with the only conn held = %p, %v; want %p", got, err, mc.c)
	}
}

// unwrapDriver is a minimal instrumenting wrapper that exposes the driver
// it wraps (Unwrap), like database/sql middleware that wants to be
// transparent.
type unwrapDriver struct{ inner driver.Driver }

func (d unwrapDriver) Open(name string) (driver.Conn, error) { return d.inner.Open(name) }
func (d unwrapDriver) Unwrap() driver.Driver                 { return d.inner }

type unwrapConnector struct{ inner driver.Connector }

func (c unwrapConnector) Connect(ctx context.Context) (driver.Conn, error) {
	return c.inner.Connect(ctx)
}
func (c unwrapConnector) Driver() driver.Driver { return unwrapDriver{c.inner.Driver()} }

// rawConnector is an otelsql-style wrapper: its driver hides the wrapped
// one, but its conns hand out the wrapped conn through Raw.
type rawConnector struct{ inner driver.Connector }

type rawDriver struct{}

func (rawDriver) Open(string) (driver.Conn, error) { return nil, errors.New("not supported") }

type rawConn struct{ driver.Conn }

func (c rawConn) Raw() driver.Conn { return c.Conn }

func (c rawConnector) Connect(ctx context.Context) (driver.Conn, error) {
	cn, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return rawConn{cn}, nil
}
func (c rawConnector) Driver() driver.Driver { return rawDriver{} }

// TestConnectorOfThroughWrapper: a wrapping driver that exposes the one it
// wraps is unwrapped without a connection (every host down here); one that
// only exposes its conns (Raw) is unwrapped through a connection.
func TestConnectorOfThroughWrapper(t *testing.T) {
	p := closedPorts(t, 1)
	c, err := NewConnector(Config{Hosts: []Host{{Addr: "127.0.0.1", Port: uint16(p[0])}}, User: "app", ConnectTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(unwrapConnector{c})
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if got, err := ConnectorOf(ctx, db); got != c || err != nil {
		t.Fatalf("ConnectorOf through an unwrapping driver = %p, %v; want %p", got, err, c)
	}

	mc := newMockCluster(t, 1, nil)
	rdb := sql.OpenDB(rawConnector{mc.c})
	defer rdb.Close()
	if got, err := ConnectorOf(ctx, rdb); got != mc.c || err != nil {
		t.Fatalf("ConnectorOf through Raw conns = %p, %v; want %p", got, err, mc.c)
	}
}
