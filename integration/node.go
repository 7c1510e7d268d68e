package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// node is one server of a cluster. Its directory holds the data directory
// and the server log (kept outside the data directory so that
// pg_basebackup does not copy the primary's log into a replica).
type node struct {
	index   int
	name    string // application_name when streaming
	dir     string // <cluster dir>/n<index>, owned by the server user
	data    string // dir/data
	real    string // data with symbolic links resolved, to recognise its processes
	logPath string // dir/postgres.log
	port    int

	// Guarded by Cluster.mu.
	running  bool
	crashed  bool // killed and not started since
	pid      int  // postmaster pid while running
	standby  bool // in recovery, following upstream
	upstream int  // index of the node it streams from; -1 if none
}

func (c *Cluster) newNode(i int) (*node, error) {
	dir := filepath.Join(c.dir, "n"+strconv.Itoa(i))
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("integration: %w", err)
	}
	if err := c.acct.chown(dir); err != nil {
		return nil, fmt.Errorf("integration: %w", err)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, fmt.Errorf("integration: %w", err)
	}
	port, err := reservePort()
	if err != nil {
		return nil, err
	}
	return &node{
		index:    i,
		name:     "replica" + strconv.Itoa(i),
		dir:      dir,
		data:     filepath.Join(dir, "data"),
		real:     filepath.Join(real, "data"),
		logPath:  filepath.Join(dir, "postgres.log"),
		port:     port,
		upstream: -1,
	}, nil
}

// serverConf returns the postgresql.conf settings of every node: fast, not
// durable, TCP on loopback only (no Unix socket, whose path length is
// limited), ready for streaming replication.
func (c *Cluster) serverConf(replicas int) []string {
	// Cloning takes two WAL senders and a temporary slot per replica, all
	// replicas at once, while the first clones already stream.
	senders := max(10, 3*replicas+2)
	conf := []string{
		"# pgreplica integration harness",
		"listen_addresses = '127.0.0.1'",
		"unix_socket_directories = ''",
		"max_connections = 100",
		"shared_buffers = 16MB",
		"fsync = off",
		"full_page_writes = off",
		"synchronous_commit = on",
		"wal_level = replica",
		fmt.Sprintf("max_wal_senders = %d", senders),
		fmt.Sprintf("max_replication_slots = %d", senders),
		"hot_standby = on",
		// Reconnect quickly after the upstream restarts or is replaced.
		"wal_retrieve_retry_interval = '100ms'",
		"wal_receiver_status_interval = '1s'",
		"logging_collector = off",
		"log_line_prefix = '%m [%p] %q%a '",
		"lc_messages = 'C'",
	}
	if c.bin.major >= 13 {
		conf = append(conf, "wal_keep_size = '512MB'")
	} else {
		conf = append(conf, "wal_keep_segments = 32")
	}
	return conf
}

// initPrimary creates the database cluster of n and writes its
// configuration.
func (c *Cluster) initPrimary(ctx context.Context, n *node, replicas int, extra []string) error {
	if err := c.initData(ctx, n); err != nil {
		return err
	}
	conf := append(c.serverConf(replicas), extra...)
	if err := appendFile(filepath.Join(n.data, "postgresql.conf"), strings.Join(conf, "\n")+"\n"); err != nil {
		return err
	}
	hba := strings.Join([]string{
		"# pgreplica integration harness: trust on loopback, replication included",
		"local all         all              trust",
		"local replication all              trust",
		"host  all         all 127.0.0.1/32 trust",
		"host  replication all 127.0.0.1/32 trust",
		"host  all         all ::1/128      trust",
		"host  replication all ::1/128      trust",
	}, "\n") + "\n"
	if err := c.writeFile(filepath.Join(n.data, "pg_hba.conf"), hba); err != nil {
		return err
	}
	return nil
}

// baseBackup clones upstream into n's data directory.
func (c *Cluster) baseBackup(ctx context.Context, n, upstream *node) error {
	_, err := c.run(ctx, "pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(upstream.port),
		"-U", "postgres", "-w", "-D", n.data, "-X", "stream", "-R", "-c", "fast", "--no-sync")
	return err
}

// writeStandbyConf makes n a standby of upstream: it replaces
// primary_conninfo in postgresql.auto.conf (where pg_basebackup -R and
// ALTER SYSTEM keep it) and creates standby.signal. n must be stopped.
func (c *Cluster) writeStandbyConf(n, upstream *node) error {
	auto := filepath.Join(n.data, "postgresql.auto.conf")
	old, err := os.ReadFile(auto)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("integration: %w", err)
	}
	var b strings.Builder
	for _, line := range strings.SplitAfter(string(old), "\n") {
		key, _, _ := strings.Cut(strings.TrimSpace(line), "=")
		if k := strings.TrimSpace(key); k == "primary_conninfo" || k == "primary_slot_name" {
			continue
		}
		b.WriteString(line)
	}
	if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
		b.WriteByte('\n')
	}
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=postgres application_name=%s sslmode=disable connect_timeout=5",
		upstream.port, n.name)
	fmt.Fprintf(&b, "primary_conninfo = '%s'\n", strings.ReplaceAll(conninfo, "'", "''"))
	if err := c.writeFile(auto, b.String()); err != nil {
		return err
	}
	return c.writeFile(filepath.Join(n.data, "standby.signal"), "")
}

// startNew starts a node for the first time, moving it to another free port
// when its port was taken in the meantime.
func (c *Cluster) startNew(ctx context.Context, n *node) error {
	for attempt := 1; ; attempt++ {
		from := fileSize(n.logPath)
		err := c.startNode(ctx, n)
		if err == nil || attempt == 5 || !portTaken(n.logPath, from) {
			return err
		}
		port, perr := reservePort()
		if perr != nil {
			return err
		}
		c.logf("integration: port %d of node %d is taken, trying %d", n.port, n.index, port)
		releasePort(n.port)
		n.port = port
	}
}

// startNode starts n's postmaster with pg_ctl and waits until it accepts
// connections (a standby: until it reached consistency).
func (c *Cluster) startNode(ctx context.Context, n *node) error {
	// A postmaster.pid that no process backs up is stale (the server
	// crashed); its pid may even belong to a zombie, which the new
	// postmaster would take for a live one.
	if len(serverProcs(n.real, readPid(n.data))) == 0 {
		_ = os.Remove(filepath.Join(n.data, "postmaster.pid"))
	}
	_, err := c.run(ctx, "pg_ctl", "start", "-w", "-t", ctlTimeout(ctx), "-D", n.data,
		"-l", n.logPath, "-o", "-p "+strconv.Itoa(n.port))
	if err != nil {
		// pg_ctl may have given up while the postmaster lives on.
		_ = c.killNode(n, readPid(n.data))
		return err // it names the data directory and the port
	}
	pid := readPid(n.data)
	if pid <= 0 {
		return fmt.Errorf("integration: node %d started but %s/postmaster.pid names no pid", n.index, n.data)
	}
	c.mu.Lock()
	n.running, n.crashed, n.pid = true, false, pid
	c.mu.Unlock()
	return nil
}

// stopNode shuts n down with sig sent to its postmaster (SIGINT: fast
// shutdown, SIGQUIT: immediate) and waits until all of its processes have
// exited. Stopping a stopped node does nothing.
func (c *Cluster) stopNode(ctx context.Context, n *node, sig syscall.Signal) error {
	c.mu.Lock()
	pid, running := n.pid, n.running
	c.mu.Unlock()
	if !running {
		return nil
	}
	if err := signalProcess(pid, sig); err != nil {
		return fmt.Errorf("integration: signalling node %d (pid %d): %w", n.index, pid, err)
	}
	err := poll(ctx, fmt.Sprintf("node %d (pid %d) to exit", n.index, pid), func(context.Context) (bool, string, error) {
		left := serverProcs(n.real, pid)
		return len(left) == 0, fmt.Sprintf("processes %v remain", left), nil
	})
	if err != nil {
		return err
	}
	c.mu.Lock()
	n.running, n.pid = false, 0
	c.mu.Unlock()
	return nil
}

// killNode crashes n: it sends SIGKILL to its postmaster pm (so that it
// forks no more) and then to every process of the server until none is
// left, bounded by ctx. It then removes postmaster.pid, which a crash
// leaves behind: where init does not reap orphans the dead postmaster
// stays a zombie, and the next postmaster would take it for a live one.
func (c *Cluster) killNode(n *node, pm int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	found := len(serverProcs(n.real, pm)) > 0
	_ = signalProcess(pm, syscall.SIGKILL)
	err := poll(ctx, fmt.Sprintf("node %d (pid %d) to die", n.index, pm), func(context.Context) (bool, string, error) {
		left := serverProcs(n.real, pm)
		for _, p := range left {
			_ = signalProcess(p, syscall.SIGKILL)
		}
		return len(left) == 0, fmt.Sprintf("processes %v remain", left), nil
	})
	if err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(n.data, "postmaster.pid")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("integration: %w", err)
	}
	c.mu.Lock()
	n.running, n.pid = false, 0
	n.crashed = n.crashed || found
	c.mu.Unlock()
	return nil
}

// shutdown stops n for good, whatever state it is in: immediate shutdown,
// then SIGKILL after a grace period. It also finds a server that n does not
// know runs (one that pg_ctl left behind when it gave up).
//
// A server that was killed and not started since has left its shared
// memory segments behind (System V and /dev/shm), which only a postmaster
// of the same data directory reclaims, so shutdown starts it once more
// before stopping it.
func (c *Cluster) shutdown(n *node) {
	c.mu.Lock()
	if !n.running && len(serverProcs(n.real, readPid(n.data))) > 0 {
		n.running, n.pid = true, readPid(n.data)
	}
	crashed := n.crashed && !n.running
	c.mu.Unlock()
	if crashed {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		_ = c.startNode(ctx, n)
		cancel()
	}
	c.mu.Lock()
	pid, running := n.pid, n.running
	c.mu.Unlock()
	if !running {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c.stopNode(ctx, n, syscall.SIGQUIT) != nil {
		_ = c.killNode(n, pid)
	}
}

// run executes a server tool as the server user, in the cluster directory,
// with a clean environment (no PG* variables, C locale). The error quotes
// the tool's output.
func (c *Cluster) run(ctx context.Context, tool string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, c.bin.path(tool), args...)
	cmd.Dir = c.dir
	cmd.Env = c.env()
	cmd.SysProcAttr = c.acct.sysProcAttr()
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("integration: %s %s: %w\n%s", tool, strings.Join(args, " "), err,
			strings.TrimSpace(out.String()))
	}
	return out.Bytes(), nil
}

// env is the environment of the server tools: ours without the variables
// that steer libpq, the server or the locale.
func (c *Cluster) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PG") || strings.HasPrefix(k, "LC_") || k == "LANG" || k == "HOME" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C", "LANG=C", "HOME="+c.dir)
}

// writeFile writes a file inside a data directory, owned by the server user.
func (c *Cluster) writeFile(path, content string) error {
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		return fmt.Errorf("integration: %w", err)
	}
	if err := c.acct.chown(path); err != nil {
		return fmt.Errorf("integration: %w", err)
	}
	return nil
}

// appendFile appends to an existing file (keeping its owner).
func appendFile(path, content string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("integration: %w", err)
	}
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		return fmt.Errorf("integration: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("integration: %w", err)
	}
	return nil
}

// readPid returns the postmaster pid recorded in data/postmaster.pid, or 0.
func readPid(data string) int {
	b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return 0
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		return 0
	}
	return pid
}

// ctlTimeout returns pg_ctl's -t value (seconds) for ctx's deadline.
func ctlTimeout(ctx context.Context) string {
	secs := 60.0
	if d, ok := ctx.Deadline(); ok {
		secs = math.Max(1, math.Ceil(time.Until(d).Seconds()))
	}
	return strconv.Itoa(int(secs))
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// portTaken reports whether the log written since offset from says that
// the server could not bind its port.
func portTaken(logPath string, from int64) bool {
	b, err := os.ReadFile(logPath)
	if err != nil || int64(len(b)) < from {
		return false
	}
	s := string(b[from:])
	return strings.Contains(s, "Address already in use") || strings.Contains(s, "could not bind")
}

// logTail returns the last n lines of a log file.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n") + "\n"
}

// Ports handed out in this process, so that clusters started side by side
// never pick the same one.
var (
	portsMu sync.Mutex
	ports   = map[int]bool{}
)

// reservePort returns a free TCP port on 127.0.0.1. Another process may
// still take it before the server binds it; startNew retries then.
func reservePort() (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("integration: finding a free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !ports[port] {
			ports[port] = true
			return port, nil
		}
	}
	return 0, errors.New("integration: no free port found")
}

func releasePort(port int) {
	portsMu.Lock()
	delete(ports, port)
	portsMu.Unlock()
}
