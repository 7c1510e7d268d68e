package pgreplica

import (
	"context"
	"database/sql/driver"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestServerGone(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: fmt.Errorf("connection refused")}
	for _, tc := range []struct {
		name string
		err  error
		lost bool // isConnLost
		gone bool // serverGone: drop the host's idle connections
	}{
		{"admin shutdown", &pgconn.PgError{Code: "57P01"}, true, true},
		{"crash shutdown", &pgconn.PgError{Code: "57P02"}, true, true},
		{"unexpected EOF", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true, true},
		{"network", refused, true, true},
		{"statement deadline", fmt.Errorf("timeout: %w", context.DeadlineExceeded), true, false},
		{"cancelled", context.Canceled, false, false},
		{"bad conn before sending", driver.ErrBadConn, true, false},
		{"unique violation", &pgconn.PgError{Code: "23505"}, false, false},
		{"nil", nil, false, false},
	} {
		if got := isConnLost(tc.err); got != tc.lost {
			t.Errorf("%s: isConnLost = %v, want %v", tc.name, got, tc.lost)
		}
		if got := serverGone(tc.err); got != tc.gone {
			t.Errorf("%s: serverGone = %v, want %v", tc.name, got, tc.gone)
		}
	}
}
