package pgreplica

import (
	"context"
	"crypto/tls"
	"database/sql/driver"
	"errors"
	"net"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgreplica/pgreplica/internal/pgxflight"
	"github.com/pgreplica/pgreplica/internal/pgxtrace"
	"github.com/pgreplica/pgreplica/internal/sockpeek"
	"github.com/pgreplica/pgreplica/internal/sqlstate"
)

// pgx: its connector (pgx's stdlib, dialing through pgx's own function
// plus sockpeek.Note, through the application's hooks when it gave some:
// pgxhooks.go) and its wire, which reaches the protocol underneath
// database/sql. Its reads that carry their check in their own flight are
// in inflight.go.

// pgxConnector is pgx's connector for a host's dsn, dialing through
// pgx's own dial function plus sockpeek.Note; its error is pgx's
// rejection of dsn. Pinned to one address of the host's name, its lookup
// answers that address: pgx dials it and still verifies the name.
func pgxConnector(cfg *Config, dsn, pin string) (driver.Connector, error) {
	pc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	if cfg.LookupFunc != nil {
		pc.LookupFunc = pgconn.LookupFunc(cfg.LookupFunc)
	}
	if cfg.Pgx != nil {
		return cfg.Pgx.connector(pc, pin), nil
	}
	pc.LookupFunc = pinned(pc.LookupFunc, pin)
	pc.DialFunc = notingSockets(pc.DialFunc)
	return stdlib.GetConnector(*pc), nil
}

// pinned returns a lookup that answers pin, for a node dialled at one
// address of its name (resolve.go), else lookup.
func pinned(lookup pgconn.LookupFunc, pin string) pgconn.LookupFunc {
	if pin == "" {
		return lookup
	}
	return func(context.Context, string) ([]string, error) { return []string{pin}, nil }
}

// notingSockets returns dial, which then notes each socket it dialed
// (sockpeek.Note).
func notingSockets(dial pgconn.DialFunc) pgconn.DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err == nil {
			sockpeek.Note(ctx, c)
		}
		return c, err
	}
}

// pgxWire is the wire of a pgx stdlib connection: it reaches the protocol
// underneath database/sql.
type pgxWire struct {
	conn *pgx.Conn
	// descs are the descriptions of the statements its reads in flight
	// sent, and its query mode (inflight.go).
	descs pgxflight.Descriptions
	// tracer is the application's tracer on it, nil for none
	// (internal/pgxtrace): what pgreplica sends on the connection through
	// pgconn is traced through it.
	tracer *pgxtrace.Tracer
}

// describe sends an unnamed Parse/Describe/Sync: one round trip and
// nothing to deallocate (pgx's own Prepare would name the statement after
// its text and cost a Deallocate at Close).
func (w *pgxWire) describe(ctx context.Context, _ driver.Conn, query string) (int, error) {
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
func (w *pgxWire) beginChecked(ctx context.Context, _ driver.Conn) (LSN, error) {
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
func (w *pgxWire) live(socks *sockpeek.Sockets) bool {
	if w.conn.PgConn().IsClosed() {
		return false
	}
	switch socks.Peek() {
	case sockpeek.Closed, sockpeek.Pending:
		return false
	}
	return true
}

// connector returns pgx's connector for the server whose configuration,
// parsed from its DSN, is server, dialled at pin when it is not ""
// (resolve.go): ConnConfig's for that server when set, run through the
// hooks.
func (h *PgxHooks) connector(server *pgx.ConnConfig, pin string) driver.Connector {
	base := server
	if h.ConnConfig != nil {
		base = connConfigFor(h.ConnConfig, server)
	}
	before := func(ctx context.Context, cc *pgx.ConnConfig) error { return h.beforeConnect(ctx, cc, pin) }
	return stdlib.GetConnector(*base, stdlib.OptionBeforeConnect(before), stdlib.OptionAfterConnect(h.afterConnect))
}

// beforeConnect gives BeforeConnect a copy of its own (stdlib's is
// shallow: RuntimeParams would be shared), then adds what pgreplica
// needs of whatever it returns: the node's address (pin), the dial that
// notes the sockets, the tracer that hides pgreplica's own statements.
func (h *PgxHooks) beforeConnect(ctx context.Context, cc *pgx.ConnConfig, pin string) error {
	*cc = *cc.Copy()
	if h.BeforeConnect != nil {
		if err := h.BeforeConnect(ctx, cc); err != nil {
			return err
		}
	}
	cc.LookupFunc = pinned(cc.LookupFunc, pin)
	cc.DialFunc = notingSockets(cc.DialFunc)
	cc.Tracer = pgxtrace.Wrap(cc.Tracer)
	return nil
}

// afterConnect runs AfterConnect on the application's connections, not
// the monitor's, and closes a connection it failed (stdlib would leave it
// open).
func (h *PgxHooks) afterConnect(ctx context.Context, conn *pgx.Conn) error {
	if h.AfterConnect == nil || pgxtrace.IsOwn(ctx) {
		return nil
	}
	if err := h.AfterConnect(ctx, conn); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return err
	}
	return nil
}

// connConfigFor returns base for the server whose own configuration
// (parsed from its DSN) is server: base's settings, server's Host, Port
// and LookupFunc (Config.LookupFunc, which defaults to base's), and the
// TLS configurations base has for its first host, carried over to that
// server (see PgxHooks.ConnConfig).
func connConfigFor(base, server *pgx.ConnConfig) *pgx.ConnConfig {
	cc := base.Copy()
	cc.Host, cc.Port, cc.LookupFunc = server.Host, server.Port, server.LookupFunc
	cc.Fallbacks = nil
	if strings.HasPrefix(server.Host, "/") {
		cc.TLSConfig = nil // a Unix socket: pgx never uses TLS there
		return cc
	}
	forServer := func(t *tls.Config) *tls.Config {
		if t == nil || t.ServerName == "" || t.ServerName != base.Host {
			return t
		}
		t = t.Clone()
		t.ServerName = server.Host
		return t
	}
	cc.TLSConfig = forServer(base.TLSConfig)
	for _, fb := range base.Fallbacks {
		if fb.Host == base.Host && fb.Port == base.Port {
			cc.Fallbacks = append(cc.Fallbacks, &pgconn.FallbackConfig{Host: server.Host, Port: server.Port, TLSConfig: forServer(fb.TLSConfig)})
		}
	}
	return cc
}

// pgxConnOf returns the pgx connection under a connection of the pgx
// inner driver (the pgx-native handle's router is only handed out for
// it).
func pgxConnOf(conn driver.Conn) *pgx.Conn { return conn.(*stdlib.Conn).Conn() }

// notIdle returns errNotIdle for a connection that is busy or inside a
// transaction, else err.
func notIdle(conn driver.Conn, err error) error {
	if pc := pgxConnOf(conn); (err == nil || !sqlstate.ServerGone(err)) && (pc.IsClosed() || pc.PgConn().IsBusy() || pc.PgConn().TxStatus() != 'I') {
		return errNotIdle
	}
	return err
}

// errNotIdle makes the pool close a connection given back busy or inside
// a transaction, as pgxpool does: nobody else may inherit that state.
var errNotIdle = errors.Join(driver.ErrBadConn, errors.New("pgreplica: connection given back busy or in a transaction"))
