package pgreplica

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"net"

	"github.com/jackc/pgx/v5/pgconn"
)

// sqlState returns the SQLSTATE of a server error from either inner driver.
func sqlState(err error) string {
	var s interface{ SQLState() string }
	if errors.As(err, &s) {
		return s.SQLState()
	}
	return ""
}

// SQLSTATE codes the router acts on (PostgreSQL's errcodes.txt).
const (
	stateReadOnlyTx          = "25006" // read_only_sql_transaction
	stateSerialization       = "40001" // also "conflict with recovery" on a standby
	stateAdminShutdown       = "57P01" // admin_shutdown
	stateCrashShutdown       = "57P02" // crash_shutdown
	stateCannotConnectNow    = "57P03" // cannot_connect_now
	stateConnectionException = "08000" // connection_exception
	stateConnectionNotExist  = "08003" // connection_does_not_exist
	stateConnectionFailure   = "08006" // connection_failure
)

// isRecoveryConflict reports a replica query cancelled by WAL replay
// ("canceling statement due to conflict with recovery"). Outside a
// transaction a replica raises 40001 for nothing else.
func isRecoveryConflict(err error) bool {
	return sqlState(err) == stateSerialization
}

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
	case stateAdminShutdown, stateCrashShutdown, stateCannotConnectNow,
		stateConnectionException, stateConnectionNotExist, stateConnectionFailure:
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
