package sqlstate

import (
	"context"
	"database/sql/driver"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/lib/pq"
)

func TestServerGone(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: fmt.Errorf("connection refused")}
	for _, tc := range []struct {
		name string
		err  error
		lost bool // ConnLost
		gone bool // ServerGone: drop the host's idle connections
	}{
		{"admin shutdown", &pgconn.PgError{Code: "57P01"}, true, true},
		{"crash shutdown", &pgconn.PgError{Code: "57P02"}, true, true},
		{"lib/pq admin shutdown", &pq.Error{Code: "57P01"}, true, true},
		{"PgBouncer's server conn crashed", &pgconn.PgError{Severity: "FATAL", Code: "08P01", Message: "server conn crashed?"}, true, true},
		{"lib/pq FATAL protocol violation", &pq.Error{Severity: pq.Efatal, Code: "08P01"}, true, true},
		{"Bind with too few parameters", &pgconn.PgError{Severity: "ERROR", Code: "08P01"}, false, false},
		{"lib/pq ERROR protocol violation", &pq.Error{Severity: "ERROR", Code: "08P01"}, false, false},
		{"unexpected EOF", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true, true},
		{"network", refused, true, true},
		{"statement deadline", fmt.Errorf("timeout: %w", context.DeadlineExceeded), true, false},
		{"cancelled", context.Canceled, false, false},
		{"bad conn before sending", driver.ErrBadConn, true, false},
		{"unique violation", &pgconn.PgError{Code: "23505"}, false, false},
		{"nil", nil, false, false},
	} {
		if got := ConnLost(tc.err); got != tc.lost {
			t.Errorf("%s: ConnLost = %v, want %v", tc.name, got, tc.lost)
		}
		if got := ServerGone(tc.err); got != tc.gone {
			t.Errorf("%s: ServerGone = %v, want %v", tc.name, got, tc.gone)
		}
	}
}

// TestOf reads the code from both inner drivers' errors, wrapped or not.
func TestOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&pgconn.PgError{Code: ReadOnlyTx}, ReadOnlyTx},
		{fmt.Errorf("route: %w", &pq.Error{Code: Serialization}), Serialization},
		{io.EOF, ""},
		{nil, ""},
	} {
		if got := Of(tc.err); got != tc.want {
			t.Errorf("Of(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
	if !RecoveryConflict(&pq.Error{Code: "40001"}) || RecoveryConflict(&pq.Error{Code: "40P01"}) {
		t.Error("RecoveryConflict: 40001 only")
	}
}

// FuzzConnLost: no error text or code makes the predicates panic, and a
// gone server is always a lost connection.
func FuzzConnLost(f *testing.F) {
	for _, c := range []string{"57P01", "08006", "23505", "", "40001"} {
		f.Add(c, "x")
	}
	f.Fuzz(func(t *testing.T, code, msg string) {
		for _, err := range []error{&pgconn.PgError{Code: code, Message: msg}, &pq.Error{Code: pq.ErrorCode(code), Message: msg}, fmt.Errorf("%s: %w", msg, &pgconn.PgError{Code: code})} {
			if ServerGone(err) && !ConnLost(err) {
				t.Fatalf("%v: gone but not lost", err)
			}
			_ = RecoveryConflict(err)
		}
	})
}
