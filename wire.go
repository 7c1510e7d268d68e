package pgreplica

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgreplica/pgreplica/internal/libpqdsn"
	"github.com/pgreplica/pgreplica/internal/pgxflight"
	"github.com/pgreplica/pgreplica/internal/pgxtrace"
)

// The seam to the inner drivers. Statements on an inner connection go
// through database/sql/driver's interfaces, which every inner driver
// implements: exec, query and prepare by the fastest one it offers, the
// conversion of arguments database/sql would have done, and the positions
// the router reads. Beyond them, only this seam knows which driver it
// talks to: innerConnector makes a host's connector (wire_pgx.go for pgx,
// wire_pq.go for lib/pq), newWire gives each connection the wire through
// which the router reaches what those interfaces do not carry.

// innerFunc makes the inner driver's connector for one host, dialled at
// pin when pin is not "" (resolve.go).
type innerFunc func(cfg *Config, h Host, pin string) (driver.Connector, error)

// innerConnector returns the inner driver's connector for one host.
func innerConnector(cfg *Config, h Host, pin string) (driver.Connector, error) {
	dsn := cfg.hostDSN(h)
	switch cfg.Driver {
	case DriverPq:
		return pqConnector(cfg, h, dsn, pin)
	default:
		return pgxConnector(cfg, h, dsn, pin)
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
	// runs on the server that answered (replaycheck.go).
	beginChecked(ctx context.Context, p *physical) (LSN, error)
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

// execInner runs a statement through the inner driver's fastest interface.
func execInner(ctx context.Context, c driver.Conn, query string, args []driver.NamedValue) (driver.Result, error) {
	if e, ok := c.(driver.ExecerContext); ok {
		r, err := e.ExecContext(ctx, query, args)
		if !errors.Is(err, driver.ErrSkip) {
			return r, err
		}
	}
	st, err := prepareInner(ctx, c, query)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	if se, ok := st.(driver.StmtExecContext); ok {
		return se.ExecContext(ctx, args)
	}
	return nil, fmt.Errorf("pgreplica: inner statement does not implement StmtExecContext")
}

// queryInner runs a query through the inner driver's fastest interface.
func queryInner(ctx context.Context, c driver.Conn, query string, args []driver.NamedValue) (driver.Rows, error) {
	if q, ok := c.(driver.QueryerContext); ok {
		r, err := q.QueryContext(ctx, query, args)
		if !errors.Is(err, driver.ErrSkip) {
			return r, err
		}
	}
	st, err := prepareInner(ctx, c, query)
	if err != nil {
		return nil, err
	}
	sq, ok := st.(driver.StmtQueryContext)
	if !ok {
		st.Close()
		return nil, fmt.Errorf("pgreplica: inner statement does not implement StmtQueryContext")
	}
	rows, err := sq.QueryContext(ctx, args)
	if err != nil {
		st.Close()
		return nil, err
	}
	return &stmtRows{Rows: rows, stmt: st}, nil
}

func prepareInner(ctx context.Context, c driver.Conn, query string) (driver.Stmt, error) {
	if p, ok := c.(driver.ConnPrepareContext); ok {
		return p.PrepareContext(ctx, query)
	}
	return c.Prepare(query)
}

// stmtRows closes the statement a fallback query prepared.
type stmtRows struct {
	driver.Rows
	stmt driver.Stmt
}

func (r *stmtRows) Close() error {
	err := r.Rows.Close()
	r.stmt.Close()
	return err
}

// convertArgs applies the physical conn's own NamedValueChecker, then
// database/sql's default conversion, exactly as database/sql would have done
// had it talked to that conn directly. pgreplica's virtual conn accepts
// every value (it does not know yet which physical conn will run the
// statement), so the conversion happens here.
func convertArgs(c driver.Conn, args []driver.NamedValue) error {
	if len(args) == 0 {
		return nil // the pgx handle's statements, and any without arguments
	}
	checker, _ := c.(driver.NamedValueChecker)
	for i := range args {
		nv := &args[i]
		if checker != nil {
			err := checker.CheckNamedValue(nv)
			if err == nil {
				continue
			}
			if !errors.Is(err, driver.ErrSkip) {
				return err
			}
		}
		v, err := driver.DefaultParameterConverter.ConvertValue(nv.Value)
		if err != nil {
			return fmt.Errorf("pgreplica: converting argument $%d: %w", nv.Ordinal, err)
		}
		nv.Value = v
	}
	return nil
}

// queryLSN runs a query that answers one pg_lsn as text (a replay, flush
// or insert position) and parses it.
func queryLSN(ctx context.Context, c driver.Conn, query string) (LSN, error) {
	rows, err := queryInner(pgxtrace.Own(ctx), c, query, nil) // pgreplica's, not traced
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	v := make([]driver.Value, 1)
	if err := rows.Next(v); err != nil {
		return 0, err
	}
	return lsnValue(v[0])
}

// Positions the router reads. A write's LSN must be read after its COMMIT
// and be at or past the end of its record: for a synchronous commit the
// flush LSN is the tight choice (already flushed, so replicas will reach
// it); when the commit may have been asynchronous only the insert LSN is
// safe (the flush LSN is usually still below the commit record).
const (
	replaySQL    = "SELECT pg_last_wal_replay_lsn()::text"
	flushLSNSQL  = "SELECT pg_current_wal_flush_lsn()::text"
	insertLSNSQL = "SELECT pg_current_wal_insert_lsn()::text"
)

func lsnSQL(async bool) string {
	if async {
		return insertLSNSQL
	}
	return flushLSNSQL
}
