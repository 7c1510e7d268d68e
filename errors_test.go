package pgreplica

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"github.com/pgreplica/pgreplica/internal/tuning"
	"log/slog"
	"net"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/lib/pq"

	"github.com/pgreplica/pgreplica/internal/lagtrack"
	"github.com/pgreplica/pgreplica/internal/prober"
)

// topologyAfter applies one probe result per host, as the monitor does
// (applyStatus), and builds the topology; a nil error is a replica.
func topologyAfter(t *testing.T, password string, errs ...error) *topology {
	t.Helper()
	m := &monitor{settings: monitorSettings{password: password}, log: slog.New(slog.DiscardHandler)}
	var nodes []*node
	for i, err := range errs {
		h := Host{Addr: fmt.Sprintf("db%d.example", i), Port: 5432}
		n := &node{idx: i, host: h, name: hostName(h)}
		st := &nodeStatus{role: roleReplica, err: err, sysid: 7, timeline: 1, at: time.Now()}
		if err != nil {
			st.role = roleUnknown
		}
		m.applyStatus(n, st)
		nodes = append(nodes, n)
	}
	return buildTopology(nodes, &lagtrack.Tracker{})
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
	cfg := Config{knobs: tuning.Knobs{MonitorInterval: time.Hour, HealthCheckAfter: -1},
		Hosts: []Host{{Addr: "db0.example", Port: 5432}, {Addr: "db1.example", Port: 5432}}}
	c, err := newConnector(cfg, func(*Config, Host, string) (driver.Connector, error) {
		return refusingConnector{refused}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A cluster of its own: write positions the process keeps for
	// another test's cluster would make the read wait for them.
	sysid := 1000 + mockSysIDs.Add(1)
	c.probe = func(context.Context, *node) *prober.Status {
		return standInAnswer(roleReplica, 0x100, sysid)
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

// waitPlan is a read that needs 0/7D0 and has waited its whole 150 ms
// budget on a cluster whose replicas are at 0/3E8 and 0/5DC (h2, 1.2 s
// behind).
func waitPlan() *plan {
	top := snapshot(spec{role: rolePrimary}, spec{role: roleReplica, replay: 1000, lag: 3 * time.Second},
		spec{role: roleReplica, replay: 1500, lag: 1200 * time.Millisecond})
	now := time.Now()
	return &plan{topo: top, read: true, need: 2000, budget: 150 * time.Millisecond,
		at: now.Add(-150 * time.Millisecond), deadline: now}
}

// TestReplicaWaitErrorSaysWhatEndedIt: a read that waited for a replica
// in vain names the position, the wait, the replica that came closest
// with its lag, and what ended the wait: the budget's setting, the
// context's deadline, or the context, whose error it wraps.
func TestReplicaWaitErrorSaysWhatEndedIt(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	soon, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(time.Hour))
	defer cancel2()
	for _, tc := range []struct {
		name    string
		ctx     context.Context
		limit   string
		ctxErr  error
		fitsCtx bool // the context's deadline is the wait's
	}{
		{name: "the budget", ctx: context.Background(), limit: "until pgreplica_wait_budget (150ms) ran out"},
		{name: "the context's deadline", ctx: soon, limit: "until the context's deadline", ctxErr: context.DeadlineExceeded, fitsCtx: true},
		{name: "the context cancelled", ctx: cancelled, limit: "until its context was cancelled", ctxErr: context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pl := waitPlan()
			if tc.fitsCtx {
				pl.deadline, _ = tc.ctx.Deadline()
			}
			err := replicaWaitError(tc.ctx, pl, 1500)
			msg := err.Error()
			for _, part := range []string{"pgreplica: no replica fresh enough: waited 150ms for a replica to replay 0/7D0", tc.limit,
				"closest h2:5432 at 0/5DC (500 bytes behind, lag 1.2s at its last probe)"} {
				if !strings.Contains(msg, part) {
					t.Errorf("%q does not say %q", msg, part)
				}
			}
			var nf *NoFreshReplicaError
			if !errors.As(err, &nf) || nf.Reason != ReasonTimeout || !errors.Is(err, ErrNoFreshReplica) || errors.Is(err, ErrNoReplica) {
				t.Errorf("%v: want a *NoFreshReplicaError with ReasonTimeout, matching ErrNoFreshReplica only", err)
			}
			if tc.ctxErr != nil && !errors.Is(err, tc.ctxErr) {
				t.Errorf("%v does not match %v", err, tc.ctxErr)
			}
			if tc.ctxErr == nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
				t.Errorf("%v matches a context error: the budget ended it", err)
			}
		})
	}
}

// TestNoWaitErrorsSayWhy: a wait predicted futile says so and names the
// closest replica's pause and apply delay; a read without a position that
// no replica may serve names each replica's reason with its setting.
func TestNoWaitErrorsSayWhy(t *testing.T) {
	pl := waitPlan()
	pl.topo.nodes[2].status.paused = true
	pl.topo.nodes[1].status.applyDelay = time.Second
	msg := futileWaitError(context.Background(), pl).Error()
	for _, part := range []string{"no replica is predicted to replay 0/7D0 within pgreplica_wait_budget (150ms)", "not waited for",
		"closest h2:5432 at 0/5DC (500 bytes behind, lag 1.2s at its last probe, replay paused)"} {
		if !strings.Contains(msg, part) {
			t.Errorf("%q does not say %q", msg, part)
		}
	}
	lagging := &plan{topo: pl.topo, read: true, maxLag: time.Second}
	err := noReplicaError(lagging)
	msg = err.Error()
	for _, part := range []string{"no healthy replica within the lag bounds: h1:5432: lag 3s > pgreplica_max_lag 1s; h2:5432: lag 1.2s > pgreplica_max_lag 1s"} {
		if !strings.Contains(msg, part) {
			t.Errorf("%q does not say %q", msg, part)
		}
	}
	if !errors.Is(err, ErrNoReplica) {
		t.Errorf("%v: want ErrNoReplica", err)
	}
}

// waitedFallback is how ErrFallbackLimit begins: the slots and the wait.
var waitedFallback = regexp.MustCompile(`^pgreplica: too many reads falling back to the primary: waited [1-9][0-9]*ms for one of the 1 fallback slots on the primary \(half of pgreplica_max_conns_per_host\), all held, until `)

// TestFallbackQueueErrorSaysWhatEndedIt: a read that queued for a
// fallback slot in vain gets ErrFallbackLimit naming the slots, how long
// it waited, what ended the wait and why it fell back; when its context
// ended the wait (its deadline, or a cancel), the error matches the
// context's too. Each is counted in FallbackRejected.
func TestFallbackQueueErrorSaysWhatEndedIt(t *testing.T) {
	why := &NoFreshReplicaError{Reason: ReasonTimeout, Detail: "waited 150ms for a replica to replay 0/7D0"}
	for i, tc := range []struct {
		name   string
		ctx    func() (context.Context, context.CancelFunc)
		limit  string
		ctxErr error
	}{
		{name: "no deadline: ConnectTimeout", ctx: func() (context.Context, context.CancelFunc) { return context.Background(), func() {} },
			limit: "until pgreplica_connect_timeout (20ms) ran out, the context having no deadline"},
		{name: "the context's deadline", ctx: func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 20*time.Millisecond)
		}, limit: "until the context's deadline", ctxErr: context.DeadlineExceeded},
		{name: "the context cancelled", ctx: func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(20*time.Millisecond, cancel)
			return ctx, cancel
		}, limit: "until its context was cancelled", ctxErr: context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := tc.ctx()
			defer cancel()
			c := &router{log: slog.New(slog.DiscardHandler)}
			wait := 20 * time.Millisecond
			if tc.ctxErr != nil {
				wait = time.Hour
			}
			c.fallbacks = fallbackGate{slots: make(chan struct{}, 1), wait: wait, metrics: &c.metrics, log: c.log}
			c.fallbacks.tryTake() // the one slot is held
			_, err := c.fallBack(ctx, &plan{}, why)
			msg := err.Error()
			if !waitedFallback.MatchString(msg) {
				t.Errorf("%q does not match %s", msg, waitedFallback)
			}
			for _, part := range []string{tc.limit, "it fell back because no replica fresh enough: waited 150ms for a replica to replay 0/7D0"} {
				if !strings.Contains(msg, part) {
					t.Errorf("%q does not say %q", msg, part)
				}
			}
			if !errors.Is(err, ErrFallbackLimit) || errors.Is(err, ErrNoFreshReplica) {
				t.Errorf("%v: want ErrFallbackLimit, and not ErrNoFreshReplica", err)
			}
			if tc.ctxErr != nil && (!errors.Is(err, tc.ctxErr) || !strings.HasSuffix(msg, ": "+tc.ctxErr.Error())) {
				t.Errorf("%v does not end in and match %v", err, tc.ctxErr)
			}
			if tc.ctxErr == nil && errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%v matches context.DeadlineExceeded: ConnectTimeout ended it", err)
			}
			if got := c.metrics.fallbackRejected.Load(); got != 1 {
				t.Errorf("FallbackRejected = %d, want 1 (case %d)", got, i)
			}
		})
	}
}

// TestConnectionWaitErrorNamesTheHost: a borrow whose context ends while
// the pool makes a connection says which host, how long, how full the pool
// was, and wraps the context's error.
func TestConnectionWaitErrorNamesTheHost(t *testing.T) {
	cfg := Config{knobs: tuning.Knobs{MonitorInterval: time.Hour, HealthCheckAfter: -1}, MaxConnsPerHost: 3,
		Hosts: []Host{{Addr: "db0.example", Port: 5432}}}
	gate := make(chan struct{})
	defer close(gate)
	c, err := newConnector(cfg, func(*Config, Host, string) (driver.Connector, error) {
		return gatedConnector{gate: gate}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	_, err = (*c.nodes.Load())[0].pool.acquire(ctx)
	if want := regexp.MustCompile(`^pgreplica: waited [1-9][0-9]*ms for a connection to db0\.example:5432 \(0 of pgreplica_max_conns_per_host 3 in use, 1 being made\), until its context ended: context deadline exceeded$`); err == nil || !want.MatchString(err.Error()) {
		t.Errorf("%v does not match %s", err, want)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%v does not match context.DeadlineExceeded", err)
	}
}
