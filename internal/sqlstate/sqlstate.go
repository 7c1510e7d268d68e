// Package sqlstate names the SQLSTATE codes the router acts on
// (PostgreSQL's errcodes.txt) and reads them, and what they mean for a
// connection, from the errors of either inner driver (pgx, lib/pq). It
// knows nothing of the router.
package sqlstate

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"net"

	"github.com/jackc/pgx/v5/pgconn"
)

// Of returns the SQLSTATE of a server error from either inner driver, or
// "" for any other error.
func Of(err error) string {
	var s interface{ SQLState() string }
	if errors.As(err, &s) {
		return s.SQLState()
	}
	return ""
}

// Codes the router acts on.
const (
	ReadOnlyTx           = "25006" // read_only_sql_transaction
	Serialization        = "40001" // also "conflict with recovery" on a standby
	AdminShutdown        = "57P01" // admin_shutdown
	CrashShutdown        = "57P02" // crash_shutdown
	CannotConnectNow     = "57P03" // cannot_connect_now
	ConnectionException  = "08000" // connection_exception
	ConnectionNotExist   = "08003" // connection_does_not_exist
	ConnectionFailure    = "08006" // connection_failure
	ProtocolViolation    = "08P01" // protocol_violation
	InvalidAuthorization = "28000" // invalid_authorization_specification: no such role, no pg_hba.conf entry
	InvalidPassword      = "28P01" // invalid_password
)

// RecoveryConflict reports a replica query cancelled by WAL replay
// ("canceling statement due to conflict with recovery"). Outside a
// transaction a replica raises 40001 for nothing else.
func RecoveryConflict(err error) bool {
	return Of(err) == Serialization
}

// ConnLost reports an error that means the server connection is gone.
func ConnLost(err error) bool {
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
	switch Of(err) {
	case AdminShutdown, CrashShutdown, CannotConnectNow,
		ConnectionException, ConnectionNotExist, ConnectionFailure:
		return true
	case ProtocolViolation:
		// FATAL: the session is over. PgBouncer ends a client's with it
		// when the server connection behind died ("server conn
		// crashed?": an HAProxy or a server restarted under it). As an
		// ERROR (a Bind with too few parameters) the connection lives.
		return fatal(err)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return false
	}
	return pgconn.SafeToRetry(err)
}

// fatal reports a server error of severity FATAL, from either inner
// driver (lib/pq's errors say so with Fatal).
func fatal(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Severity == "FATAL" || pe.SeverityUnlocalized == "FATAL"
	}
	var f interface{ Fatal() bool }
	return errors.As(err, &f) && f.Fatal()
}

// ServerGone reports a lost connection that says nothing about the
// statement: not one that the inner driver closed because the statement's
// context ended (pgx reports that as a timeout, which is a net.Error too),
// nor pgx's ErrBadConn for a connection it found broken before sending.
func ServerGone(err error) bool {
	return ConnLost(err) && !errors.Is(err, driver.ErrBadConn) &&
		!errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled)
}
