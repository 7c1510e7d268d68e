package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ErrNoPgBouncer reports that the PgBouncer program was not found.
// StartPgBouncer wraps it with the places it looked; test it with
// errors.Is.
var ErrNoPgBouncer = errors.New("integration: no pgbouncer program found; install PgBouncer " +
	"(Debian/Ubuntu: apt-get install pgbouncer) or point $" + PgBouncerEnv + " at it")

// PgBouncerEnv names the environment variable that gives the path of the
// pgbouncer program (default: pgbouncer on PATH, else /usr/sbin/pgbouncer).
const PgBouncerEnv = "PGREPLICA_PGBOUNCER"

// PoolMode is PgBouncer's pool_mode: when a server connection goes back to
// the pool.
type PoolMode string

const (
	// PoolSession: a client keeps one server connection from login to
	// logout (PgBouncer's default).
	PoolSession PoolMode = "session"
	// PoolTransaction: a client holds a server connection for one
	// transaction (or one statement outside a transaction) only; between
	// them it has none, so it keeps its connection across a restart of
	// the server, and its next transaction may run on another server
	// connection (behind an endpoint: on another server).
	PoolTransaction PoolMode = "transaction"
)

// PgBouncerOptions configures StartPgBouncer.
type PgBouncerOptions struct {
	// Upstream is the host:port PgBouncer connects to: one server, or an
	// endpoint in front of several. Required.
	Upstream string
	// Mode is the pool mode; default PoolSession.
	Mode PoolMode
	// PoolSize is default_pool_size, the server connections per user and
	// database; default 50.
	PoolSize int
	// MaxClients is max_client_conn; default 1000.
	MaxClients int
	// ServerLoginRetry is server_login_retry, how long PgBouncer waits
	// after a failed server login before it tries again (clients wait or
	// are refused meanwhile); default 500ms. PgBouncer's own default, 15 s,
	// would keep a pool unusable for 15 s after each server restart.
	ServerLoginRetry time.Duration
	// Extra holds more [pgbouncer] settings ("name = value"), written after
	// the harness's own and so overriding them.
	Extra []string
}

// PgBouncer is a PgBouncer process (pgbouncer 1.18 or later) on a port of
// 127.0.0.1 in front of one upstream, with authentication "trust" for the
// user postgres (the harness's servers trust every connection) and any
// database name passed through to the upstream. When the tests run as
// root it runs as the servers' OS user (postgres, or nobody), because
// PgBouncer refuses to run as root. A watchdog kills it if the test binary
// dies without calling Close. Its methods are safe for concurrent use,
// but Restart and Close must not overlap.
type PgBouncer struct {
	proc *proxyProcess
	opts PgBouncerOptions
	node int // the cluster node behind it, or -1
}

// StartPgBouncer starts PgBouncer on a free port of 127.0.0.1 and returns
// once it accepts connections. PgBouncer connects to the upstream only
// when a client needs a server connection. The error wraps ErrNoPgBouncer
// when there is no pgbouncer program.
func StartPgBouncer(ctx context.Context, opts PgBouncerOptions) (*PgBouncer, error) {
	host, port, err := net.SplitHostPort(opts.Upstream)
	if err != nil {
		return nil, fmt.Errorf("integration: pgbouncer upstream %q: %w", opts.Upstream, err)
	}
	switch opts.Mode {
	case "":
		opts.Mode = PoolSession
	case PoolSession, PoolTransaction:
	default:
		return nil, fmt.Errorf("integration: pgbouncer pool mode %q (want %q or %q)", opts.Mode, PoolSession, PoolTransaction)
	}
	if opts.PoolSize <= 0 {
		opts.PoolSize = 50
	}
	if opts.MaxClients <= 0 {
		opts.MaxClients = 1000
	}
	if opts.ServerLoginRetry <= 0 {
		opts.ServerLoginRetry = 500 * time.Millisecond
	}
	bin, err := findProgram("pgbouncer", PgBouncerEnv, ErrNoPgBouncer, "/usr/sbin/pgbouncer", "/usr/local/bin/pgbouncer", "/opt/homebrew/bin/pgbouncer")
	if err != nil {
		return nil, err
	}
	acct, err := serverAccount()
	if err != nil {
		return nil, err
	}
	p, err := newProxyProcess("pgbouncer", bin, acct, "{dir}/pgbouncer.ini")
	if err != nil {
		return nil, err
	}
	b := &PgBouncer{proc: p, opts: opts, node: -1}
	err = p.writeFile("userlist.txt", "\"postgres\" \"\"\n")
	if err == nil {
		err = p.launch(ctx, func(listen int) error {
			return p.writeFile("pgbouncer.ini", b.config(host, port, listen))
		})
	}
	if err != nil {
		_ = p.close(syscall.SIGTERM)
		return nil, err
	}
	return b, nil
}

// config is pgbouncer.ini for listening on port listen.
func (b *PgBouncer) config(host, port string, listen int) string {
	o := b.opts
	lines := []string{
		"; pgreplica integration harness",
		"[databases]",
		fmt.Sprintf("* = host=%s port=%s", host, port),
		"",
		"[pgbouncer]",
		"listen_addr = 127.0.0.1",
		"listen_port = " + strconv.Itoa(listen),
		"unix_socket_dir =",
		// trust still needs the user in auth_file (with any password).
		"auth_type = trust",
		"auth_file = " + b.proc.dir + "/userlist.txt",
		"admin_users = postgres",
		"pool_mode = " + string(o.Mode),
		"default_pool_size = " + strconv.Itoa(o.PoolSize),
		"max_client_conn = " + strconv.Itoa(o.MaxClients),
		"server_login_retry = " + strconv.FormatFloat(o.ServerLoginRetry.Seconds(), 'f', -1, 64),
		// lib/pq sends extra_float_digits, which PgBouncer 1.18 does
		// not track.
		"ignore_startup_parameters = extra_float_digits",
	}
	lines = append(lines, o.Extra...)
	return strings.Join(lines, "\n") + "\n"
}

// PgBouncer starts a PgBouncer in front of node i in the given pool mode,
// closed when t ends. Without a pgbouncer program it skips t, or fails it
// when PGREPLICA_INTEGRATION=require.
func (c *Cluster) PgBouncer(t testing.TB, i int, mode PoolMode) *PgBouncer {
	t.Helper()
	b := NewPgBouncer(t, PgBouncerOptions{Upstream: fmt.Sprintf("127.0.0.1:%d", c.Port(i)), Mode: mode})
	b.node = i
	return b
}

// NewPgBouncer starts a PgBouncer with opts (in front of any upstream,
// such as an HAProxy endpoint), closed when t ends. Without a pgbouncer
// program it skips t, or fails it when PGREPLICA_INTEGRATION=require.
func NewPgBouncer(t testing.TB, opts PgBouncerOptions) *PgBouncer {
	t.Helper()
	return startForTest(t, func(ctx context.Context) (*PgBouncer, error) { return StartPgBouncer(ctx, opts) }, ErrNoPgBouncer)
}

// needProgram ends t after a failed start of a proxy program: a skip when
// the program is missing (missing) unless PGREPLICA_INTEGRATION=require,
// else a failure.
func needProgram(t testing.TB, err, missing error) {
	t.Helper()
	if errors.Is(err, missing) && !required() {
		t.Skip(err)
	}
	t.Fatal(err)
}

// Addr returns PgBouncer's host:port.
func (b *PgBouncer) Addr() string { return b.proc.addr() }

// Upstream returns the host:port PgBouncer connects to.
func (b *PgBouncer) Upstream() string { return b.opts.Upstream }

// Mode returns the pool mode.
func (b *PgBouncer) Mode() PoolMode { return b.opts.Mode }

// Node returns the index of the cluster node behind it (Cluster.PgBouncer),
// or -1.
func (b *PgBouncer) Node() int { return b.node }

// DSN returns the URL of database postgres as user postgres through
// PgBouncer.
func (b *PgBouncer) DSN() string { return HostsDSN(b.Addr()) }

// Log returns the end of PgBouncer's log (its standard error), n lines.
func (b *PgBouncer) Log(n int) string { return logTail(b.proc.logPath, n) }

// Restart stops PgBouncer (SIGTERM, PgBouncer's immediate shutdown: every
// client and server connection is closed) and starts it again on the same
// port, and returns once it accepts connections, with how long the port
// refused them (from the signal until the new process listened: a few
// milliseconds). Clients must reconnect; their server connections are new.
func (b *PgBouncer) Restart(ctx context.Context) (time.Duration, error) {
	return b.proc.restart(ctx, syscall.SIGTERM, 0)
}

// Outage is Restart with the port refusing connections for at least down
// before PgBouncer starts again (a pooler's rolling restart, a pod
// rescheduled); it returns how long the port refused them.
func (b *PgBouncer) Outage(ctx context.Context, down time.Duration) (time.Duration, error) {
	return b.proc.restart(ctx, syscall.SIGTERM, down)
}

// Running reports whether the PgBouncer process runs (false after a
// failed Restart or Close).
func (b *PgBouncer) Running() bool { return b.proc.running() }

// Close stops PgBouncer (immediate shutdown) and removes its files. It
// may be called more than once.
func (b *PgBouncer) Close() error { return b.proc.close(syscall.SIGTERM) }

// HostsDSN returns the URL of database postgres as user postgres on the
// given host:port addresses, in order (a multi-host URL when there are
// several): postgres://postgres@A1,A2/postgres?sslmode=disable.
func HostsDSN(addrs ...string) string {
	return "postgres://postgres@" + strings.Join(addrs, ",") + "/postgres?sslmode=disable"
}
