package pgreplica

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/lib/pq"
)

// innerConnector returns the inner driver's connector for one host.
func innerConnector(cfg *Config, h Host) (driver.Connector, error) {
	dsn := cfg.hostDSN(h)
	switch cfg.Driver {
	case DriverPq:
		c, err := pq.NewConnector(dsn)
		if err != nil {
			return nil, fmt.Errorf("%w: host %s: %v", ErrBadDSN, hostName(h), redactErr(err, cfg.Password))
		}
		c.Dialer(socketDialer{}) // lib/pq's default dialer, plus noteSocket
		return c, nil
	default:
		pc, err := pgx.ParseConfig(dsn)
		if err != nil {
			return nil, fmt.Errorf("%w: host %s: %v", ErrBadDSN, hostName(h), redactErr(err, cfg.Password))
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
}

// socketDialer is lib/pq's default dialer (a zero net.Dialer) that records
// what it dials for the connection being made (see hostPool.close).
type socketDialer struct{ d net.Dialer }

func (s socketDialer) Dial(network, address string) (net.Conn, error) {
	return s.DialContext(context.Background(), network, address)
}

func (s socketDialer) DialTimeout(network, address string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return s.DialContext(ctx, network, address)
}

func (s socketDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	c, err := s.d.DialContext(ctx, network, address)
	if err == nil {
		noteSocket(ctx, c)
	}
	return c, err
}

func hostName(h Host) string {
	return net.JoinHostPort(h.Addr, fmt.Sprint(h.Port))
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
		v, err := defaultConvert(nv.Value)
		if err != nil {
			return fmt.Errorf("pgreplica: converting argument $%d: %w", nv.Ordinal, err)
		}
		nv.Value = v
	}
	return nil
}

func defaultConvert(v any) (driver.Value, error) {
	if vr, ok := v.(driver.Valuer); ok {
		// A nil pointer whose type implements Valuer on a value receiver
		// is NULL, as in database/sql.
		if rv := reflect.ValueOf(vr); rv.Kind() == reflect.Pointer && rv.IsNil() &&
			rv.Type().Elem().Implements(reflect.TypeFor[driver.Valuer]()) {
			return nil, nil
		}
		val, err := vr.Value()
		if err != nil {
			return nil, err
		}
		if !driver.IsValue(val) {
			return nil, fmt.Errorf("non-Value type %T returned from Value", val)
		}
		return val, nil
	}
	return driver.DefaultParameterConverter.ConvertValue(v)
}

// sqlState returns the SQLSTATE of a server error from either inner driver.
func sqlState(err error) string {
	var s interface{ SQLState() string }
	if errors.As(err, &s) {
		return s.SQLState()
	}
	return ""
}

// SQLSTATE codes the router acts on.
const (
	stateReadOnlyTx        = "25006" // read_only_sql_transaction
	stateSerialization     = "40001" // also "conflict with recovery" on a standby
	stateAdminShutdown     = "57P01"
	stateCannotConnectNow  = "57P03"
	stateFeatureNotSupport = "0A000"
)

// isConnLost reports an error that means the server connection is gone.
func isConnLost(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	switch sqlState(err) {
	case stateAdminShutdown, stateCannotConnectNow, "57P02", "08006", "08003", "08000":
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return false
	}
	return pgconn.SafeToRetry(err)
}

// serverGone reports a lost connection that says nothing about the
// statement: not one that the inner driver closed because the statement's
// context ended (pgx reports that as a timeout, which is a net.Error too),
// nor pgx's ErrBadConn for a connection it found broken before sending.
func serverGone(err error) bool {
	return isConnLost(err) && !errors.Is(err, driver.ErrBadConn) &&
		!errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled)
}

// redactErr returns err's message with the password blanked out, for
// errors of inner drivers that may quote their DSN.
func redactErr(err error, password string) string {
	msg := err.Error()
	if password != "" {
		msg = strings.ReplaceAll(msg, password, "xxxxx")
	}
	return msg
}
