package pgreplica

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/lib/pq"

	"github.com/pgreplica/pgreplica/internal/lagtrack"
)

// topologyAfter applies one probe result per host, as the monitor does
// (applyStatus), and builds the topology; a nil error is a replica.
func topologyAfter(t *testing.T, password string, errs ...error) *topology {
	t.Helper()
	c := &Connector{cfg: Config{Password: password}, log: slog.New(slog.DiscardHandler)}
	var nodes []*node
	for i, err := range errs {
		h := Host{Addr: fmt.Sprintf("db%d.example", i), Port: 5432}
		n := &node{idx: i, host: h, name: hostName(h)}
		st := &nodeStatus{role: roleReplica, err: err, sysid: 7, timeline: 1, at: time.Now()}
		if err != nil {
			st.role = roleUnknown
		}
		c.applyStatus(n, st)
		nodes = append(nodes, n)
	}
	return buildTopology(nodes, &lagtrack.Tracker{}, false)
}

// pgxConnectError looks like pgx's connect errors: the host repeated
// around the server's error.
func pgxConnectError(host string, cause error) error {
	return fmt.Errorf("failed to connect to `user=app database=shop`: %s:5432 (%s): server error: %w", host, host, cause)
}

// TestHostErrorsNameCauses: an error that no host could serve names each
// failed host once and each cause once, and keeps every cause reachable
// with errors.Is and errors.As.
func TestHostErrorsNameCauses(t *testing.T) {
	t.Run("wrong password on every host, pgx", func(t *testing.T) {
		var errs []error
		for i := range 3 {
			errs = append(errs, pgxConnectError(fmt.Sprintf("db%d.example", i),
				&pgconn.PgError{Severity: "FATAL", Code: "28P01", Message: `password authentication failed for user "app"`}))
		}
		tp := topologyAfter(t, "", errs...)
		for name, err := range map[string]error{"reachErr": tp.reachErr, "writeErr": tp.writeErr} {
			msg := err.Error()
			if n := strings.Count(msg, "password authentication failed"); n != 1 {
				t.Errorf("%s: the cause appears %d times: %s", name, n, msg)
			}
			if !strings.Contains(msg, "db0.example:5432, db1.example:5432, db2.example:5432: FATAL: password authentication failed") {
				t.Errorf("%s: %s: want the three hosts, then the cause", name, msg)
			}
			if !errors.Is(err, ErrNoReachableHost) || !errors.Is(err, ErrAuth) {
				t.Errorf("%s: %v: want ErrNoReachableHost and ErrAuth", name, err)
			}
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != "28P01" {
				t.Errorf("%s: errors.As finds no *pgconn.PgError 28P01 in %v", name, err)
			}
			var he *HostError
			if !errors.As(err, &he) || he.Addr != "db0.example:5432" {
				t.Errorf("%s: errors.As finds no *HostError of the first host in %v", name, err)
			}
		}
		if !errors.Is(tp.writeErr, ErrNoPrimary) || !strings.HasPrefix(tp.writeErr.Error(), "pgreplica: no primary: no reachable host: ") {
			t.Errorf("writeErr = %v", tp.writeErr)
		}
		if len(tp.reachErr.Error()) > 200 {
			t.Errorf("%d characters for one cause on three hosts: %s", len(tp.reachErr.Error()), tp.reachErr)
		}
	})

	t.Run("missing role, lib/pq", func(t *testing.T) {
		pqErr := &pq.Error{Severity: "FATAL", Code: "28000", Message: `role "ghost" does not exist`}
		tp := topologyAfter(t, "", pqErr, pqErr)
		var got *pq.Error
		if !errors.As(tp.reachErr, &got) || got.Code != "28000" {
			t.Errorf("errors.As finds no *pq.Error 28000 in %v", tp.reachErr)
		}
		if !errors.Is(tp.reachErr, ErrAuth) {
			t.Errorf("%v: want ErrAuth", tp.reachErr)
		}
		if n := strings.Count(tp.reachErr.Error(), "does not exist"); n != 1 {
			t.Errorf("the cause appears %d times: %s", n, tp.reachErr)
		}
	})

	t.Run("primary name does not resolve, replicas fine", func(t *testing.T) {
		dns := &net.DNSError{Err: "no such host", Name: "db0.example", IsNotFound: true}
		tp := topologyAfter(t, "", &resolveError{host: "db0.example", err: dns}, nil, nil)
		err := tp.writeErr
		want := "pgreplica: no primary: db0.example:5432: cannot resolve host db0.example: no such host; " +
			"every reachable host is in recovery (db1.example:5432, db2.example:5432)"
		if err.Error() != want {
			t.Errorf("writeErr:\n got %s\nwant %s", err, want)
		}
		var got *net.DNSError
		if !errors.As(err, &got) || !got.IsNotFound {
			t.Errorf("errors.As finds no *net.DNSError in %v", err)
		}
		if !errors.Is(err, ErrNoPrimary) || errors.Is(err, ErrNoReachableHost) || errors.Is(err, ErrAuth) {
			t.Errorf("%v: want ErrNoPrimary only", err)
		}
		if tp.reachErr != nil {
			t.Errorf("reachErr = %v with two replicas answering", tp.reachErr)
		}
	})

	t.Run("an inner driver's lookup failure is named too", func(t *testing.T) {
		inner := &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "db0.example", IsNotFound: true}}
		tp := topologyAfter(t, "", fmt.Errorf("failed to connect: hostname resolving error: %w", inner))
		if msg := tp.reachErr.Error(); !strings.Contains(msg, "db0.example:5432: cannot resolve host db0.example: no such host") {
			t.Errorf("reachErr = %s", msg)
		}
	})

	t.Run("stopped hosts, different causes", func(t *testing.T) {
		refused := func(port int) error {
			return &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port},
				Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
		}
		tp := topologyAfter(t, "", refused(5432), refused(5433),
			&pgconn.PgError{Severity: "FATAL", Code: "57P03", Message: "the database system is starting up"})
		want := "pgreplica: no reachable host: db0.example:5432, db1.example:5432: dial: connect: connection refused; " +
			"db2.example:5432: FATAL: the database system is starting up (SQLSTATE 57P03)"
		if got := tp.reachErr.Error(); got != want {
			t.Errorf("reachErr:\n got %s\nwant %s", got, want)
		}
		if !errors.Is(tp.reachErr, syscall.ECONNREFUSED) || errors.Is(tp.reachErr, ErrAuth) {
			t.Errorf("%v: want ECONNREFUSED reachable, not ErrAuth", tp.reachErr)
		}
	})

	t.Run("no password in the message", func(t *testing.T) {
		const secret = "s3cret-pw"
		tp := topologyAfter(t, secret, fmt.Errorf("cannot parse `password=%s`: %w", secret,
			&pgconn.PgError{Severity: "FATAL", Code: "28P01", Message: "password authentication failed"}))
		if msg := tp.reachErr.Error(); strings.Contains(msg, secret) {
			t.Errorf("the password shows: %s", msg)
		}
		var pe *pgconn.PgError
		if !errors.As(tp.reachErr, &pe) || !errors.Is(tp.reachErr, ErrAuth) {
			t.Errorf("redaction lost the cause: %v", tp.reachErr)
		}
	})

	t.Run("ErrBadConn stays out", func(t *testing.T) {
		// database/sql would run the statement again on another conn.
		tp := topologyAfter(t, "", driver.ErrBadConn)
		if errors.Is(tp.reachErr, driver.ErrBadConn) || errors.Is(tp.writeErr, driver.ErrBadConn) {
			t.Errorf("%v matches driver.ErrBadConn", tp.reachErr)
		}
	})
}

// TestUnresolvableHost: a host name that does not resolve (the .invalid
// domain never does, RFC 6761) is named as such, with both inner drivers,
// the *net.DNSError reachable and no password shown.
func TestUnresolvableHost(t *testing.T) {
	for _, inner := range []string{"pgx", "pq"} {
		t.Run(inner, func(t *testing.T) {
			const secret = "hunter2-secret"
			db, err := sql.Open(DriverName, "postgres://app:"+secret+"@nonexistent.invalid:5432/shop?sslmode=disable"+
				"&pgreplica_connect_timeout=3s&pgreplica_driver="+inner)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err = db.PingContext(ctx)
			t.Logf("%s: %v", inner, err)
			if !errors.Is(err, ErrNoReachableHost) {
				t.Fatalf("Ping = %v, want ErrNoReachableHost", err)
			}
			if !strings.Contains(err.Error(), "nonexistent.invalid:5432: cannot resolve host nonexistent.invalid") {
				t.Errorf("%q does not name the failed lookup", err)
			}
			var dns *net.DNSError
			if !errors.As(err, &dns) {
				t.Errorf("errors.As finds no *net.DNSError in %v", err)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the password shows: %v", err)
			}
		})
	}
}

// refusingConnector is an inner connector whose server refuses every
// connection.
type refusingConnector struct{ err error }

func (r refusingConnector) Connect(context.Context) (driver.Conn, error) { return nil, r.err }
func (r refusingConnector) Driver() driver.Driver                        { return nil }

// TestReadWithNothingToServeItSaysWhy: a read that no replica could take
// and that found no primary to fall back to says both: each replica's
// refusal (errors.As reaches it) and the missing primary.
func TestReadWithNothingToServeItSaysWhy(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	cfg := Config{MonitorInterval: time.Hour, HealthCheckAfter: -1,
		Hosts: []Host{{Addr: "db0.example", Port: 5432}, {Addr: "db1.example", Port: 5432}}}
	c, err := newConnector(cfg, func(*Config, Host) (driver.Connector, error) {
		return refusingConnector{refused}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	c.probe = func(context.Context, *node) *nodeStatus {
		return &nodeStatus{role: roleReplica, lsn: 0x100, timeline: 1, sysid: 7, at: time.Now()}
	}
	db := sql.OpenDB(c)
	defer db.Close()
	var x int
	err = db.QueryRowContext(context.Background(), "SELECT 1").Scan(&x)
	for _, want := range []error{ErrNoPrimary, ErrNoFreshReplica, ErrNoReplica, syscall.ECONNREFUSED} {
		if !errors.Is(err, want) {
			t.Errorf("errors.Is(%v, %v) = false", err, want)
		}
	}
	var he *HostError
	if !errors.As(err, &he) || he.Addr != "db0.example:5432" && he.Addr != "db1.example:5432" {
		t.Errorf("errors.As(*HostError): %v", he)
	}
	for _, part := range []string{"db0.example:5432: dial: connection refused", "db1.example:5432: dial: connection refused", "no primary to fall back to", "every reachable host is in recovery"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("%q does not say %q", err, part)
		}
	}
}
