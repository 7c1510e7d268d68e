package clitext

import (
	"errors"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestErrState(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{&pgconn.PgError{Code: "28P01", Message: "password authentication failed"}, "auth failed"},
		{&pgconn.PgError{Code: "3D000", Message: "database does not exist"}, "error 3D000"},
		{&net.OpError{Op: "dial", Err: errors.New("refused")}, "unreachable"},
		{errors.New("odd"), "error"},
	} {
		if got := ErrState(c.err); got != c.want {
			t.Errorf("ErrState(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
