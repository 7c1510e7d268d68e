package pgreplica

import (
	"context"
	"database/sql/driver"
	"fmt"
	"net"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgreplica/pgreplica/internal/inner"
	"github.com/pgreplica/pgreplica/internal/libpqdsn"
	"github.com/pgreplica/pgreplica/internal/pgxflight"
	"github.com/pgreplica/pgreplica/internal/pgxtrace"
	"github.com/pgreplica/pgreplica/internal/sockpeek"
)

// The seam to the inner drivers. Statements on an inner connection go
// through database/sql/driver's interfaces, which every inner driver
// implements (internal/inner): exec, query and prepare by the fastest one
// it offers, the conversion of arguments database/sql would have done, and
// the positions the router reads (queryLSN, the SQL in lsn.go). Beyond
// them, only this seam knows which driver it talks to: innerConnector
// makes a host's connector (wire_pgx.go for pgx, wire_pq.go for lib/pq),
// newWire gives each connection the wire through which the router reaches
// what those interfaces do not carry.

// innerFunc makes the inner driver's connector for one host, dialled at
// pin when pin is not "" (resolve.go).
type innerFunc func(cfg *Config, h Host, pin string) (driver.Connector, error)

// innerConnector returns the inner driver's connector for one host. Each
// driver's fails only on a DSN the driver rejects (badDSN).
func innerConnector(cfg *Config, h Host, pin string) (driver.Connector, error) {
	dsn := cfg.hostDSN(h)
	var (
		c   driver.Connector
		err error
	)
	switch cfg.Driver {
	case DriverPq:
		c, err = pqConnector(cfg, dsn, pin)
	default:
		c, err = pgxConnector(cfg, dsn, pin)
	}
	if err != nil {
		return nil, badDSN(cfg, h, err)
	}
	return c, nil
}

// badDSN is the error of an inner driver that rejected host h's DSN, its
// password masked.
func badDSN(cfg *Config, h Host, err error) error {
	return fmt.Errorf("%w: host %s: %v", ErrBadDSN, hostName(h), libpqdsn.Redact(err.Error(), cfg.Password))
}

func hostName(h Host) string {
	return net.JoinHostPort(h.Addr, fmt.Sprint(h.Port))
}

// wire is what the router needs from an inner connection beyond
// database/sql's interfaces: the only place that knows which inner driver
// it talks to (wire_pgx.go for pgx; genericWire for lib/pq and any other).
type wire interface {
	// describe asks the server to describe query (for Prepare) and
	// returns its parameter count, leaving nothing prepared.
	describe(ctx context.Context, conn driver.Conn, query string) (int, error)
	// badConnMaySend reports whether the driver returns ErrBadConn also
	// for a connection that broke after a statement was sent (lib/pq
	// does), so that ErrBadConn does not prove the write was not sent.
	badConnMaySend() bool
	// live reports whether the idle connection, whose sockets are socks,
	// can take a statement, as far as can be told without a round trip:
	// the server has not closed it or sent it a termination. The pool asks
	// before lending it, so that a write is not sent on a connection that
	// died while idle (its error would leave the write's outcome unknown).
	live(socks *sockpeek.Sockets) bool
	// backendPID is the process id the server reported at start-up
	// (BackendKeyData), 0 when the driver does not say: a pooler reports
	// its own (server.go).
	backendPID() uint32
	// beginChecked begins a read-only transaction on conn and reads the
	// replay position in it, so that what runs next in that transaction
	// runs on the server that answered (replaycheck.go).
	beginChecked(ctx context.Context, conn driver.Conn) (LSN, error)
}

// newWire returns the wire for an inner connection: the only place that
// looks at the inner connection's type.
func newWire(c driver.Conn) wire {
	if sc, ok := c.(*stdlib.Conn); ok {
		pc := sc.Conn()
		cfg := pc.Config() // a copy: once per connection
		return &pgxWire{conn: pc, descs: pgxflight.Descriptions{Mode: cfg.DefaultQueryExecMode}, tracer: pgxtrace.Of(cfg)}
	}
	if isPqConn(c) {
		return newPqWire(c)
	}
	return genericWire{}
}

// queryLSN runs a query that answers one pg_lsn as text (a replay, flush
// or insert position) and reads it as the root's LSN (internal/inner).
func queryLSN(ctx context.Context, c driver.Conn, query string) (LSN, error) {
	lsn, err := inner.QueryLSN(ctx, c, query)
	return LSN(lsn), err
}
