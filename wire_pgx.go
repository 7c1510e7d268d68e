package pgreplica

import (
	"context"
	"database/sql/driver"
	"errors"
	"net"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgreplica/pgreplica/internal/pgxflight"
	"github.com/pgreplica/pgreplica/internal/sockpeek"
)

// pgx: its connector (pgx's stdlib, dialing through pgx's own function
// plus noteSocket) and its wire, which reaches the protocol underneath
// database/sql. Its reads that carry their check in their own flight are
// in replaycheck.go.

// pgxConnector is pgx's connector for host h, dialing through pgx's own
// dial function plus noteSocket.
func pgxConnector(cfg *Config, h Host, dsn string) (driver.Connector, error) {
	pc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, badDSN(cfg, h, err)
	}
	dial := pc.DialFunc
	pc.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err == nil {
			noteSocket(ctx, c)
		}
		return c, err
	}
	return stdlib.GetConnector(*pc), nil
}

// pgxWire is the wire of a pgx stdlib connection: it reaches the protocol
// underneath database/sql.
type pgxWire struct {
	conn *pgx.Conn
	// descs are the descriptions of the statements its reads in flight
	// sent, and its query mode (replaycheck.go).
	descs pgxflight.Descriptions
}

// describe sends an unnamed Parse/Describe/Sync: one round trip and
// nothing to deallocate (pgx's own Prepare would name the statement after
// its text and cost a Deallocate at Close).
func (w *pgxWire) describe(ctx context.Context, _ *physical, query string) (int, error) {
	if w.conn.IsClosed() {
		return 0, driver.ErrBadConn // as stdlib's PrepareContext
	}
	sd, err := w.conn.PgConn().Prepare(ctx, "", query, nil)
	if err != nil {
		return 0, err
	}
	return len(sd.ParamOIDs), nil
}

// badConnMaySend is false: pgx returns ErrBadConn only when nothing was
// sent.
func (*pgxWire) badConnMaySend() bool { return false }

func (w *pgxWire) backendPID() uint32 { return w.conn.PgConn().PID() }

// beginChecked sends BEGIN and the check as one simple query: one round
// trip, one transaction.
func (w *pgxWire) beginChecked(ctx context.Context, _ *physical) (LSN, error) {
	results, err := w.conn.PgConn().Exec(ctx, "BEGIN READ ONLY; "+replaySQL).ReadAll()
	if err != nil {
		return 0, err
	}
	if len(results) != 2 || len(results[1].Rows) != 1 || len(results[1].Rows[0]) != 1 {
		return 0, errors.New("pgreplica: unexpected answer to the replay check")
	}
	return lsnValue(results[1].Rows[0][0])
}

// live asks pgx, which knows a connection it closed, then the socket. An
// idle connection with bytes pending is not used: most likely the 57P01
// of a fast shutdown, rarely a notice or a parameter status, and reading
// them with a deadline would leave pgx's background reader on the socket.
// A reconnect is cheap next to a write of unknown outcome. A healthy idle
// connection costs one system call, never a round trip.
func (w *pgxWire) live(p *physical) bool {
	if w.conn.PgConn().IsClosed() {
		return false
	}
	switch p.socks.peek() {
	case sockpeek.Closed, sockpeek.Pending:
		return false
	}
	return true
}
