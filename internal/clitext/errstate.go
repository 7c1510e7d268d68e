package clitext

import (
	"context"
	"errors"
	"net"
	"strings"

	"github.com/pgreplica/pgreplica"
)

// ErrState names the kind of failure behind a probe error, for a status
// column: denied, auth failed, error SQLSTATE, timeout, unreachable or
// error.
func ErrState(err error) string {
	if errors.Is(err, pgreplica.ErrInsufficientPrivilege) {
		return "denied" // answers, but the role may not use it
	}
	var coded interface{ SQLState() string }
	if errors.As(err, &coded) && strings.HasPrefix(coded.SQLState(), "28") {
		return "auth failed" // class 28: invalid authorization specification
	}
	if errors.As(err, &coded) {
		return "error " + coded.SQLState()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	var ne net.Error
	if errors.As(err, &ne) {
		if ne.Timeout() {
			return "timeout"
		}
		return "unreachable"
	}
	return "error"
}
