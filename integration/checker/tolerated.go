package checker

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// killErrorGrace is how long after a killed replica is back its lost
// connections may still surface: a pooled connection to the old server
// fails only when it is next used.
const killErrorGrace = 2 * time.Second

// killError reports whether op is a read that failed because a replica was
// killed: it ran while one was down or shortly after it came back (see
// killErrorGrace), and its error says the connection was lost or refused,
// or the server was starting up. Such reads are tolerated: a router may
// surface a connection lost in the middle of a query. Every other failed
// operation counts as an error of the run, and no failed operation can be
// a violation (see Check).
func killError(op *Op, restarts []Restart) bool {
	if op.Err == nil || op.Kind != OpRead || !connectionLost(op.Err) {
		return false
	}
	for i := range restarts {
		r := &restarts[i]
		if op.End.After(r.Killed) && op.Start.Before(r.Started.Add(killErrorGrace)) {
			return true
		}
	}
	return false
}

// connectionLost reports an error of a lost, broken or refused connection,
// as pgx, lib/pq and the network report them, or of a server refusing
// connections while it shuts down, crashed or starts up. A timeout is not
// one: a read that hangs is a failure whatever the faults.
func connectionLost(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	for _, target := range []error{driver.ErrBadConn, io.EOF, io.ErrUnexpectedEOF, pgconn.ErrConnClosed,
		syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EPIPE, net.ErrClosed} {
		if errors.Is(err, target) {
			return true
		}
	}
	if ne := net.Error(nil); errors.As(err, &ne) && !ne.Timeout() {
		return true
	}
	if ce := (*pgconn.ConnectError)(nil); errors.As(err, &ce) {
		return true
	}
	var coded interface{ SQLState() string }
	if errors.As(err, &coded) {
		// Class 08 is connection exception; 57P01-57P03 are admin_shutdown,
		// crash_shutdown and cannot_connect_now ("the database system is
		// starting up").
		code := coded.SQLState()
		return strings.HasPrefix(code, "08") || code == "57P01" || code == "57P02" || code == "57P03"
	}
	return false
}
