//go:build linux

package patroni

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica/integration"
)

// ErrNoPatroni reports that the patroni program (or patronictl beside it)
// was not found. Start wraps it with the places it looked.
var ErrNoPatroni = errors.New("patroni: no patroni program found; install Patroni 3 " +
	"(Debian/Ubuntu: apt-get install patroni) or point $" + PatroniEnv + " at it")

// ErrNoEtcd reports that the etcd program was not found.
var ErrNoEtcd = errors.New("patroni: no etcd program found; install etcd 3.4 or later " +
	"(Debian/Ubuntu: apt-get install etcd-server) or point $" + EtcdEnv + " at it")

// ErrNoPgTools reports that the PostgreSQL server binaries Patroni needs
// (postgres, initdb, pg_ctl, pg_basebackup, pg_rewind) were not found in
// one directory. It wraps integration.ErrNoPostgres.
var ErrNoPgTools = fmt.Errorf("%w (Patroni needs initdb, pg_ctl, postgres, pg_basebackup and pg_rewind in one directory)",
	integration.ErrNoPostgres)

// Environment variables that name other programs.
const (
	PatroniEnv = "PGREPLICA_PATRONI_BIN" // the patroni program
	EtcdEnv    = "PGREPLICA_ETCD"        // the etcd program
	// KeepEnv, when set, keeps the cluster's directory (every member's
	// log and data, etcd's, HAProxy's) after Close, which still stops
	// every process.
	KeepEnv = "PGREPLICA_PATRONI_KEEP"
)

// Options configures a cluster. The zero value is the shape users run: three
// members, asynchronous replication, ttl 10 s, loop_wait 1 s,
// retry_timeout 4 s, use_pg_rewind on, Patroni failing over at once when
// the leader's PostgreSQL crashes, etcd through its v2 API, HAProxy in
// front.
type Options struct {
	// Members is how many members start (one becomes the leader, the
	// others its replicas); default 3.
	Members int
	// SynchronousMode turns on Patroni's synchronous_mode: one replica is
	// the synchronous standby, and only it may be promoted, so that no
	// acknowledged write is lost in a failover.
	SynchronousMode bool
	// TTL, LoopWait and RetryTimeout are Patroni's ttl, loop_wait and
	// retry_timeout, in whole seconds; defaults 10, 1 and 4 (Patroni wants
	// loop_wait + 2 × retry_timeout ≤ ttl).
	TTL, LoopWait, RetryTimeout int
	// RestartCrashedPrimary keeps Patroni's default primary_start_timeout
	// (300 s): a leader whose PostgreSQL crashed is restarted in place.
	// By default it is 0: Patroni fails over at once.
	RestartCrashedPrimary bool
	// MaximumLagOnFailover is maximum_lag_on_failover in bytes; default 1 MB.
	MaximumLagOnFailover int64
	// DCS picks Patroni's client of etcd: "etcd" (the v2 API; default) or
	// "etcd3" (see the package documentation for Patroni 3.0.2's bug).
	DCS string
	// Parameters are more postgresql.conf settings of every member.
	Parameters map[string]string
	// NoHAProxy starts no HAProxy (and does not need one).
	NoHAProxy bool
	// ReplicaLag is the lag bound of HAProxy's third port, checked with
	// GET /replica?lag=ReplicaLag; default "1MB".
	ReplicaLag string
	// HAProxyCheck is HAProxy's check interval (inter); a server is taken
	// out after 3 failed checks and back in after 2 good ones, as in
	// Patroni's documented configuration (which checks every 3 s);
	// default 500ms.
	HAProxyCheck time.Duration
	// BinDir holds the PostgreSQL server binaries; default
	// $PGREPLICA_PG_BIN, else the directory of pg_ctl on PATH, else the
	// newest /usr/lib/postgresql/*/bin.
	BinDir string
	// Logf receives progress messages; default none.
	Logf func(format string, args ...any)
}

func (o Options) withDefaults() Options {
	if o.Members == 0 {
		o.Members = 3
	}
	if o.TTL == 0 {
		o.TTL = 10
	}
	if o.LoopWait == 0 {
		o.LoopWait = 1
	}
	if o.RetryTimeout == 0 {
		o.RetryTimeout = 4
	}
	if o.MaximumLagOnFailover == 0 {
		o.MaximumLagOnFailover = 1 << 20
	}
	if o.DCS == "" {
		o.DCS = "etcd"
	}
	if o.ReplicaLag == "" {
		o.ReplicaLag = "1MB"
	}
	if o.HAProxyCheck == 0 {
		o.HAProxyCheck = 500 * time.Millisecond
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	return o
}

func (o Options) validate() error {
	if o.Members < 1 {
		return fmt.Errorf("patroni: %d members", o.Members)
	}
	if o.DCS != "etcd" && o.DCS != "etcd3" {
		return fmt.Errorf("patroni: DCS %q: want etcd or etcd3", o.DCS)
	}
	if o.LoopWait+2*o.RetryTimeout > o.TTL {
		return fmt.Errorf("patroni: loop_wait %d + 2 × retry_timeout %d > ttl %d", o.LoopWait, o.RetryTimeout, o.TTL)
	}
	return nil
}

// Cluster is a running Patroni cluster. Its methods are safe for
// concurrent use, but the ones that change a member (Failover, Freeze,
// Thaw, AddMember, RemoveMember, Switchover) must not overlap.
type Cluster struct {
	opts  Options
	dir   string
	pgBin string
	acct  account
	dog   *watchdog
	http  *http.Client
	scope string

	patroniBin, etcdBin, haproxyBin string

	etcd                     *proc
	etcdPort, etcdPeer       int
	haproxy                  *proc
	writerPort, readerPort   int
	readerLagPort            int
	haproxyCfg, haproxyState string

	mu      sync.Mutex
	members []*member
	closed  bool
}

// member is one Patroni member: a Patroni daemon and its PostgreSQL.
type member struct {
	index    int
	name     string
	pgPort   int
	restPort int
	dir      string // the member's directory (Patroni works there)
	data     string // PostgreSQL's data directory
	patroni  *proc
	removed  bool
	frozen   []int // the processes Freeze stopped
}

// Start starts etcd, opts.Members Patroni members and HAProxy, and
// returns once the cluster has a leader and every other member streams
// from it (see WaitHealthy). The error wraps ErrNoPatroni, ErrNoEtcd,
// ErrNoPgTools or integration.ErrNoHAProxy when a program is missing.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	c := &Cluster{opts: opts, http: &http.Client{}}
	if c.patroniBin, err = findProgram("patroni", PatroniEnv, ErrNoPatroni, "/usr/bin/patroni", "/usr/local/bin/patroni"); err != nil {
		return nil, err
	}
	if c.etcdBin, err = findProgram("etcd", EtcdEnv, ErrNoEtcd, "/usr/bin/etcd", "/usr/local/bin/etcd"); err != nil {
		return nil, err
	}
	if !opts.NoHAProxy {
		if c.haproxyBin, err = findProgram("haproxy", integration.HAProxyEnv, integration.ErrNoHAProxy,
			"/usr/sbin/haproxy", "/usr/local/sbin/haproxy"); err != nil {
			return nil, err
		}
	}
	if c.pgBin, err = findPgBin(opts.BinDir); err != nil {
		return nil, err
	}
	if c.acct, err = serverAccount(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgr-patroni")
	if err != nil {
		return nil, fmt.Errorf("patroni: %w", err)
	}
	if dir, err = filepath.EvalSymlinks(dir); err != nil {
		return nil, fmt.Errorf("patroni: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // the servers' user enters it
		return nil, fmt.Errorf("patroni: %w", err)
	}
	c.dir = dir
	c.scope = "pgr" + strconv.Itoa(os.Getpid())
	c.dog = startWatchdog(dir)
	defer func() {
		if err != nil {
			err = c.withState(err)
			if cerr := c.Close(); cerr != nil {
				err = errors.Join(err, cerr)
			}
		}
	}()
	if err := c.startEtcd(ctx); err != nil {
		return nil, err
	}
	opts.Logf("patroni: etcd on 127.0.0.1:%d (%s API), starting %d members", c.etcdPort, opts.DCS, opts.Members)
	for range opts.Members {
		if _, err := c.startMember(); err != nil {
			return nil, err
		}
	}
	if _, err := c.WaitHealthy(ctx, opts.Members-1); err != nil {
		return nil, err
	}
	if !opts.NoHAProxy {
		if err := c.startHAProxy(ctx); err != nil {
			return nil, err
		}
	}
	opts.Logf("patroni: cluster %s ready in %s", c.scope, dir)
	return c, nil
}

// New starts a cluster for t with Start, bounded by three minutes, and
// closes it when t ends. When a program is missing it skips t, or fails
// it under PGREPLICA_INTEGRATION=require.
func New(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := Start(ctx, opts)
	if err != nil {
		Need(t, err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return c
}

// Need ends t after a failed Start: a skip when a program is missing,
// unless PGREPLICA_INTEGRATION=require, else a failure.
func Need(t testing.TB, err error) {
	t.Helper()
	missing := errors.Is(err, ErrNoPatroni) || errors.Is(err, ErrNoEtcd) ||
		errors.Is(err, integration.ErrNoPostgres) || errors.Is(err, integration.ErrNoHAProxy)
	if missing && os.Getenv(integration.RequireEnv) != "require" {
		t.Skipf("%v\n(set %s=require to make this a failure)", err, integration.RequireEnv)
	}
	t.Fatal(err)
}

// Dir is the cluster's directory: etcd's data, each member's directory
// (patroni.yml, the data directory, its log) and HAProxy's.
func (c *Cluster) Dir() string { return c.dir }

// Scope is the Patroni cluster's name (scope).
func (c *Cluster) Scope() string { return c.scope }

// startEtcd starts a one-member etcd and waits until it answers.
func (c *Cluster) startEtcd(ctx context.Context) error {
	var err error
	if c.etcdPort, err = freePort(); err != nil {
		return err
	}
	if c.etcdPeer, err = freePort(); err != nil {
		return err
	}
	dir := filepath.Join(c.dir, "etcd")
	if err := self().mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("patroni: %w", err)
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", c.etcdPort)
	peer := fmt.Sprintf("http://127.0.0.1:%d", c.etcdPeer)
	args := []string{
		"--name", "etcd0", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "etcd0=" + peer, "--initial-cluster-state", "new",
		"--initial-cluster-token", c.scope,
		"--logger", "zap", "--log-level", "warn",
	}
	if c.opts.DCS == "etcd" {
		args = append(args, "--enable-v2=true")
	}
	c.etcd, err = startProc("etcd", dir, filepath.Join(c.dir, "etcd.log"), filepath.Join(c.dir, "etcd.pid"),
		self(), cleanEnv(dir), c.etcdBin, args...)
	if err != nil {
		return err
	}
	return c.poll(ctx, "etcd to answer", func(ctx context.Context) (bool, string) {
		if !c.etcd.running() {
			return false, "etcd exited:\n" + logTail(c.etcd.logPath, 20)
		}
		body, code, err := c.get(ctx, client+"/health", 500*time.Millisecond)
		if err != nil {
			return false, err.Error()
		}
		return code == http.StatusOK && strings.Contains(body, "true"), body
	})
}

// startMember creates a member's directory and configuration and starts
// its Patroni daemon: the first one bootstraps the cluster, the others
// clone the leader with pg_basebackup. It does not wait.
func (c *Cluster) startMember() (*member, error) {
	pgPort, err := freePort()
	if err != nil {
		return nil, err
	}
	restPort, err := freePort()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	i := len(c.members)
	m := &member{index: i, name: fmt.Sprintf("m%d", i), pgPort: pgPort, restPort: restPort}
	c.members = append(c.members, m)
	c.mu.Unlock()
	m.dir = filepath.Join(c.dir, m.name)
	m.data = filepath.Join(m.dir, "data")
	if err := c.acct.mkdir(m.dir, 0o700); err != nil {
		return nil, fmt.Errorf("patroni: %w", err)
	}
	cfg := filepath.Join(m.dir, "patroni.yml")
	if err := c.acct.writeFile(cfg, c.patroniConfig(m), 0o600); err != nil {
		return nil, fmt.Errorf("patroni: %w", err)
	}
	p, err := startProc(m.name, m.dir, filepath.Join(m.dir, "patroni.log"), filepath.Join(c.dir, m.name+".pid"),
		c.acct, cleanEnv(m.dir), c.patroniBin, cfg)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	m.patroni = p
	c.mu.Unlock()
	c.opts.Logf("patroni: member %s: PostgreSQL on 127.0.0.1:%d, REST API on 127.0.0.1:%d", m.name, pgPort, restPort)
	return m, nil
}

// patroniConfig is patroni.yml of member m.
func (c *Cluster) patroniConfig(m *member) string {
	o := c.opts
	params := map[string]string{
		"wal_level":             "replica",
		"hot_standby":           "on",
		"wal_log_hints":         "on",
		"max_wal_senders":       "10",
		"max_replication_slots": "10",
		"wal_keep_size":         "256MB",
		"max_connections":       "200",
	}
	local := map[string]string{
		"unix_socket_directories": m.dir,
		"log_line_prefix":         "%m [%p] ",
		"shared_buffers":          "32MB",
	}
	for k, v := range o.Parameters {
		local[k] = v
	}
	startTimeout := 0
	if o.RestartCrashedPrimary {
		startTimeout = 300
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("# pgreplica integration harness: member %s of a Patroni cluster", m.name)
	w("scope: %s", c.scope)
	w("namespace: /pgreplica/")
	w("name: %s", m.name)
	w("log:")
	w("  level: INFO")
	w("restapi:")
	w("  listen: 127.0.0.1:%d", m.restPort)
	w("  connect_address: 127.0.0.1:%d", m.restPort)
	w("%s:", o.DCS)
	w("  hosts: 127.0.0.1:%d", c.etcdPort)
	w("bootstrap:")
	w("  dcs:")
	w("    ttl: %d", o.TTL)
	w("    loop_wait: %d", o.LoopWait)
	w("    retry_timeout: %d", o.RetryTimeout)
	w("    maximum_lag_on_failover: %d", o.MaximumLagOnFailover)
	w("    primary_start_timeout: %d", startTimeout)
	w("    synchronous_mode: %v", o.SynchronousMode)
	w("    postgresql:")
	w("      use_pg_rewind: true")
	w("      use_slots: true")
	w("      parameters:")
	writeParams(&b, "        ", params)
	w("  initdb:")
	w("  - encoding: UTF8")
	w("  - auth: trust")
	w("postgresql:")
	w("  listen: 127.0.0.1:%d", m.pgPort)
	w("  connect_address: 127.0.0.1:%d", m.pgPort)
	w("  data_dir: %s", m.data)
	w("  bin_dir: %s", c.pgBin)
	w("  pgpass: %s", filepath.Join(m.dir, "pgpass"))
	w("  authentication:")
	for _, role := range []string{"superuser", "replication", "rewind"} {
		w("    %s:", role)
		w("      username: postgres")
	}
	w("  pg_hba:")
	w("  - local all all trust")
	w("  - host all all 127.0.0.1/32 trust")
	w("  - host replication all 127.0.0.1/32 trust")
	w("  parameters:")
	writeParams(&b, "    ", local)
	w("tags:")
	w("  nofailover: false")
	w("  noloadbalance: false")
	w("  clonefrom: false")
	w("  nosync: false")
	return b.String()
}

// writeParams writes YAML lines "name: 'value'" in name order.
func writeParams(b *strings.Builder, indent string, params map[string]string) {
	names := make([]string, 0, len(params))
	for k := range params {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Fprintf(b, "%s%s: '%s'\n", indent, k, strings.ReplaceAll(params[k], "'", "''"))
	}
}

// Close stops HAProxy, every Patroni daemon (SIGKILL, so that none
// restarts or promotes anything), every PostgreSQL server (immediate
// shutdown) and etcd, checks that no process of the cluster is left, and
// removes its directory. It may be called more than once.
func (c *Cluster) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	members := slices.Clone(c.members)
	c.mu.Unlock()
	if c.dir == "" {
		return nil
	}
	// Nothing frozen: a stopped process handles no signal.
	for _, pid := range procsIn(c.dir, true) {
		_ = signalPid(pid, syscall.SIGCONT)
	}
	if c.haproxy != nil {
		c.haproxy.stop(syscall.SIGTERM, 5*time.Second)
	}
	for _, m := range members {
		if m.patroni != nil {
			m.patroni.stop(syscall.SIGKILL, 5*time.Second)
		}
	}
	for _, m := range members {
		if m.data == "" {
			continue
		}
		if pm := postmasterPid(m.data); pm > 0 {
			_ = signalPid(pm, syscall.SIGQUIT) // immediate shutdown
		}
	}
	var errs []error
	deadline := time.Now().Add(10 * time.Second)
	for _, m := range members {
		if m.data == "" {
			continue
		}
		for len(procsIn(m.data, false)) > 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond) // no condition to await: processes exit
		}
		if left := procsIn(m.data, false); len(left) > 0 {
			errs = append(errs, fmt.Errorf("patroni: member %s: PostgreSQL processes %v left after an immediate shutdown, killed", m.name, left))
			for _, pid := range left {
				_ = signalPid(pid, syscall.SIGKILL)
			}
		}
	}
	if c.etcd != nil {
		c.etcd.stop(syscall.SIGTERM, 5*time.Second)
	}
	if left := procsIn(c.dir, true); len(left) > 0 {
		errs = append(errs, fmt.Errorf("patroni: processes %v left in %s, killed", left, c.dir))
		for _, pid := range left {
			_ = signalPid(pid, syscall.SIGKILL)
		}
	}
	if os.Getenv(KeepEnv) != "" {
		c.dog.abandon()
		c.opts.Logf("patroni: %s=%s: the cluster's directory (logs, data) stays: %s", KeepEnv, os.Getenv(KeepEnv), c.dir)
	} else {
		if err := os.RemoveAll(c.dir); err != nil {
			errs = append(errs, fmt.Errorf("patroni: removing %s: %w", c.dir, err))
		}
		c.dog.release()
	}
	for _, p := range []int{c.etcdPort, c.etcdPeer, c.writerPort, c.readerPort, c.readerLagPort} {
		if p != 0 {
			releasePort(p)
		}
	}
	for _, m := range members {
		releasePort(m.pgPort)
		releasePort(m.restPort)
	}
	return errors.Join(errs...)
}

// Len is the number of members ever started, removed ones included: a
// member's index never changes.
func (c *Cluster) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.members)
}

// Live lists the members not removed.
func (c *Cluster) Live() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []int
	for _, m := range c.members {
		if !m.removed {
			out = append(out, m.index)
		}
	}
	return out
}

// Name is member i's Patroni name ("m0", "m1", …).
func (c *Cluster) Name(i int) string { return c.member(i).name }

// Port is member i's PostgreSQL port: inet_server_port() there.
func (c *Cluster) Port(i int) int { return c.member(i).pgPort }

// Addr is member i's PostgreSQL host:port.
func (c *Cluster) Addr(i int) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(c.member(i).pgPort))
}

// RESTAddr is member i's Patroni REST API base URL.
func (c *Cluster) RESTAddr(i int) string {
	return fmt.Sprintf("http://127.0.0.1:%d", c.member(i).restPort)
}

// NodeAt returns the member whose PostgreSQL listens on port, or -1.
func (c *Cluster) NodeAt(port int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.members {
		if m.pgPort == port {
			return m.index
		}
	}
	return -1
}

// DSN is the multi-host URL of every member not removed (database and
// user postgres), in member order.
func (c *Cluster) DSN() string {
	var addrs []string
	for _, i := range c.Live() {
		addrs = append(addrs, c.Addr(i))
	}
	return integration.HostsDSN(addrs...)
}

// MemberDSN is the URL of member i alone.
func (c *Cluster) MemberDSN(i int) string { return integration.HostsDSN(c.Addr(i)) }

// LogTail returns the last n lines of member i's log (Patroni's and its
// PostgreSQL's output).
func (c *Cluster) LogTail(i, n int) string {
	return logTail(filepath.Join(c.member(i).dir, "patroni.log"), n)
}

func (c *Cluster) member(i int) *member {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i < 0 || i >= len(c.members) {
		panic(fmt.Sprintf("patroni: no member %d", i))
	}
	return c.members[i]
}

// findProgram locates a program: $env if set, else name on PATH, else the
// usual places. The error wraps missing.
func findProgram(name, env string, missing error, usual ...string) (string, error) {
	if p := os.Getenv(env); p != "" {
		if !isExecutable(p) {
			return "", fmt.Errorf("%w (%s=%s is not an executable file)", missing, env, p)
		}
		return p, nil
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, p := range usual {
		if isExecutable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w (not on PATH, nor in %s)", missing, strings.Join(usual, ", "))
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// pgTools are the server programs Patroni runs.
var pgTools = []string{"initdb", "pg_ctl", "postgres", "pg_basebackup", "pg_rewind", "pg_controldata"}

// findPgBin picks the PostgreSQL binaries: dir, else $PGREPLICA_PG_BIN,
// else pg_ctl's directory on PATH, else the newest Debian installation.
func findPgBin(dir string) (string, error) {
	var candidates []string
	switch {
	case dir != "":
		candidates = []string{dir}
	case os.Getenv("PGREPLICA_PG_BIN") != "":
		candidates = []string{os.Getenv("PGREPLICA_PG_BIN")}
	default:
		if p, err := exec.LookPath("pg_ctl"); err == nil {
			if r, err := filepath.EvalSymlinks(p); err == nil {
				candidates = append(candidates, filepath.Dir(r))
			}
		}
		found, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
		re := regexp.MustCompile(`/(\d+)/bin$`)
		major := func(s string) int {
			m := re.FindStringSubmatch(s)
			if m == nil {
				return 0
			}
			n, _ := strconv.Atoi(m[1])
			return n
		}
		sort.Slice(found, func(i, j int) bool { return major(found[i]) > major(found[j]) })
		candidates = append(candidates, found...)
	}
	var complaints []string
	for _, d := range candidates {
		missing := ""
		for _, t := range pgTools {
			if !isExecutable(filepath.Join(d, t)) {
				missing = t
				break
			}
		}
		if missing == "" {
			return d, nil
		}
		complaints = append(complaints, d+": no "+missing)
	}
	if len(complaints) == 0 {
		complaints = append(complaints, "no pg_ctl on PATH and no /usr/lib/postgresql/*/bin")
	}
	return "", fmt.Errorf("%w: %s", ErrNoPgTools, strings.Join(complaints, "; "))
}
