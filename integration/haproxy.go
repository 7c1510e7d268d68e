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

// ErrNoHAProxy reports that the HAProxy program was not found.
// StartHAProxy wraps it with the places it looked; test it with errors.Is.
var ErrNoHAProxy = errors.New("integration: no haproxy program found; install HAProxy " +
	"(Debian/Ubuntu: apt-get install haproxy) or point $" + HAProxyEnv + " at it")

// HAProxyEnv names the environment variable that gives the path of the
// haproxy program (default: haproxy on PATH, else /usr/sbin/haproxy).
const HAProxyEnv = "PGREPLICA_HAPROXY"

// HAProxyOptions configures StartHAProxy.
type HAProxyOptions struct {
	// Backends are the host:port addresses of the servers behind the
	// endpoint. Required.
	Backends []string
	// CheckInterval is how often HAProxy checks that each backend accepts
	// TCP connections; a backend is taken out after one failed check and
	// back in after one good one. Default 500ms; negative turns the checks
	// off (a connection to a dead backend is then refused and retried on
	// another one).
	CheckInterval time.Duration
	// Extra holds more lines of the endpoint's "listen" section, written
	// after the harness's own.
	Extra []string
}

// HAProxy is an HAProxy process (haproxy 2.x) on a port of 127.0.0.1 that
// forwards TCP connections to its backends in turn (mode tcp, balance
// roundrobin): a "reader endpoint" as Kubernetes Services, Patroni's
// HAProxy or a cloud's reader endpoint offer. Each client connection is
// one connection to one backend for its whole life; the next client
// connection goes to the next backend. A connection that the chosen
// backend refuses is tried on another one (retries 2, option redispatch
// 1). It runs as the current user. A watchdog kills it if the test binary
// dies without calling Close. Its methods are safe for concurrent use,
// but Restart and Close must not overlap.
type HAProxy struct {
	proc  *proxyProcess
	opts  HAProxyOptions
	nodes []int // the cluster nodes behind it, if known
}

// StartHAProxy starts HAProxy on a free port of 127.0.0.1 in front of
// opts.Backends and returns once it accepts connections. The error wraps
// ErrNoHAProxy when there is no haproxy program.
func StartHAProxy(ctx context.Context, opts HAProxyOptions) (*HAProxy, error) {
	if len(opts.Backends) == 0 {
		return nil, errors.New("integration: haproxy needs at least one backend")
	}
	for _, b := range opts.Backends {
		if _, _, err := net.SplitHostPort(b); err != nil {
			return nil, fmt.Errorf("integration: haproxy backend %q: %w", b, err)
		}
	}
	if opts.CheckInterval == 0 {
		opts.CheckInterval = 500 * time.Millisecond
	}
	bin, err := findProgram("haproxy", HAProxyEnv, ErrNoHAProxy, "/usr/sbin/haproxy", "/usr/local/sbin/haproxy", "/opt/homebrew/bin/haproxy")
	if err != nil {
		return nil, err
	}
	acct, err := currentAccount()
	if err != nil {
		return nil, err
	}
	// -db: stay in the foreground, no daemon.
	p, err := newProxyProcess("haproxy", bin, acct, "-db", "-f", "{dir}/haproxy.cfg")
	if err != nil {
		return nil, err
	}
	h := &HAProxy{proc: p, opts: opts}
	if err := p.launch(ctx, func(port int) error { return p.writeFile("haproxy.cfg", h.config(port)) }); err != nil {
		_ = p.close(syscall.SIGTERM)
		return nil, err
	}
	return h, nil
}

// config is haproxy.cfg for listening on port.
func (h *HAProxy) config(port int) string {
	lines := []string{
		"# pgreplica integration harness: a reader endpoint",
		"global",
		"	maxconn 4000",
		"defaults",
		"	mode tcp",
		"	timeout connect 1s",
		"	timeout client 1h",
		"	timeout server 1h",
		"	timeout check 1s",
		"	retries 2",
		"	option redispatch 1",
		"listen endpoint",
		"	bind 127.0.0.1:" + strconv.Itoa(port),
		"	balance roundrobin",
	}
	if d := h.opts.CheckInterval; d > 0 {
		lines = append(lines, fmt.Sprintf("	default-server check inter %dms fall 1 rise 1", max(d.Milliseconds(), 1)))
	}
	for i, b := range h.opts.Backends {
		lines = append(lines, fmt.Sprintf("	server b%d %s", i, b))
	}
	lines = append(lines, h.opts.Extra...)
	return strings.Join(lines, "\n") + "\n"
}

// ReaderEndpoint starts an HAProxy endpoint over the given nodes (every
// replica when none is given), closed when t ends. Without a haproxy
// program it skips t, or fails it when PGREPLICA_INTEGRATION=require.
func (c *Cluster) ReaderEndpoint(t testing.TB, nodes ...int) *HAProxy {
	t.Helper()
	if len(nodes) == 0 {
		for i := range c.Len() {
			if i != c.Primary() {
				nodes = append(nodes, i)
			}
		}
	}
	var backends []string
	for _, i := range nodes {
		backends = append(backends, fmt.Sprintf("127.0.0.1:%d", c.Port(i)))
	}
	h := NewHAProxy(t, HAProxyOptions{Backends: backends})
	h.nodes = nodes
	return h
}

// NewHAProxy starts an HAProxy with opts, closed when t ends. Without a
// haproxy program it skips t, or fails it when
// PGREPLICA_INTEGRATION=require.
func NewHAProxy(t testing.TB, opts HAProxyOptions) *HAProxy {
	t.Helper()
	return startForTest(t, func(ctx context.Context) (*HAProxy, error) { return StartHAProxy(ctx, opts) }, ErrNoHAProxy)
}

// Addr returns the endpoint's host:port.
func (h *HAProxy) Addr() string { return h.proc.addr() }

// Backends returns the host:port addresses behind the endpoint.
func (h *HAProxy) Backends() []string { return append([]string(nil), h.opts.Backends...) }

// Nodes returns the cluster nodes behind the endpoint
// (Cluster.ReaderEndpoint), or nil.
func (h *HAProxy) Nodes() []int { return append([]int(nil), h.nodes...) }

// DSN returns the URL of database postgres as user postgres through the
// endpoint.
func (h *HAProxy) DSN() string { return HostsDSN(h.Addr()) }

// Log returns the end of HAProxy's output (its alerts and warnings, such
// as a backend going down), n lines.
func (h *HAProxy) Log(n int) string { return logTail(h.proc.logPath, n) }

// Restart stops HAProxy (SIGTERM, a hard stop: every connection through
// it is closed) and starts it again on the same port, and returns once it
// accepts connections, with how long the port refused them (a few
// milliseconds). Clients must reconnect.
func (h *HAProxy) Restart(ctx context.Context) (time.Duration, error) {
	return h.proc.restart(ctx, syscall.SIGTERM, 0)
}

// Running reports whether the HAProxy process runs (false after a failed
// Restart or Close).
func (h *HAProxy) Running() bool { return h.proc.running() }

// Close stops HAProxy (hard stop) and removes its files. It may be called
// more than once.
func (h *HAProxy) Close() error { return h.proc.close(syscall.SIGTERM) }
