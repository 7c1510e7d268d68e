package pgreplica

import (
	"context"
	"database/sql/driver"
	"fmt"
	"net"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgreplica/pgreplica/internal/libpqdsn"
	"github.com/pgreplica/pgreplica/internal/pgxflight"
)

// The seam to the inner drivers, the only code that knows which one it
// talks to: innerConnector makes a host's connector (wire_pgx.go for pgx,
// wire_pq.go for lib/pq), newWire gives each connection the wire through
// which the router reaches what database/sql's interfaces do not carry.

// innerConnector returns the inner driver's connector for one host.
func innerConnector(cfg *Config, h Host) (driver.Connector, error) {
	dsn := cfg.hostDSN(h)
	switch cfg.Driver {
	case DriverPq:
		return pqConnector(cfg, h, dsn)
	default:
		return pgxConnector(cfg, h, dsn)
	}
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
	describe(ctx context.Context, p *physical, query string) (int, error)
	// badConnMaySend reports whether the driver returns ErrBadConn also
	// for a connection that broke after a statement was sent (lib/pq
	// does), so that ErrBadConn does not prove the write was not sent.
	badConnMaySend() bool
	// live reports whether the idle connection p can take a statement, as
	// far as can be told without a round trip: the server has not closed
	// it or sent it a termination. The pool asks before lending p, so that
	// a write is not sent on a connection that died while idle (its error
	// would leave the write's outcome unknown).
	live(p *physical) bool
	// backendPID is the process id the server reported at start-up
	// (BackendKeyData), 0 when the driver does not say: a pooler reports
	// its own (server.go).
	backendPID() uint32
	// beginChecked begins a read-only transaction on p and reads the
	// replay position in it, so that what runs next in that transaction
	// runs on the server that answered (pooledcheck.go).
	beginChecked(ctx context.Context, p *physical) (LSN, error)
}

// newWire returns the wire for an inner connection: the only place that
// looks at the inner connection's type.
func newWire(c driver.Conn) wire {
	if sc, ok := c.(*stdlib.Conn); ok {
		pc := sc.Conn()
		return &pgxWire{conn: pc, descs: pgxflight.Descriptions{Mode: pc.Config().DefaultQueryExecMode}}
	}
	if isPqConn(c) {
		return newPqWire(c)
	}
	return genericWire{}
}
