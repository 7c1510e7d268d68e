package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// localServers runs the servers as processes of this machine, from its
// PostgreSQL server binaries, under one temporary directory.
type localServers struct {
	bin  binaries
	acct account
	dir  string // the cluster's directory, removed by close unless keep
	keep bool   // Options.Keep: dir is Options.Dir, reused and kept
	logf func(format string, args ...any)
	dog  *watchdog

	mu    sync.Mutex
	procs map[int]*localNode // by node index
}

// localNode is the local state of one node. Its directory holds the data
// directory and the server log (kept outside the data directory so that
// a clone does not copy the primary's log into a replica).
type localNode struct {
	dir     string // <cluster dir>/n<index>, owned by the server user
	data    string // dir/data
	real    string // data with symbolic links resolved, to recognise its processes
	logPath string // dir/postgres.log

	// Guarded by localServers.mu.
	pid     int  // postmaster pid while running, else 0
	crashed bool // killed and not started since
}

// newLocalServers finds the server binaries and creates the cluster's
// directory. The error wraps ErrNoPostgres when there are no binaries.
func newLocalServers(ctx context.Context, opts Options) (*localServers, error) {
	bin, err := findBinaries(ctx, opts.BinDir)
	if err != nil {
		return nil, err
	}
	acct, err := serverAccount()
	if err != nil {
		return nil, err
	}
	if err := acct.canReach(bin.dir); err != nil {
		return nil, fmt.Errorf("integration: the server binaries in %s are out of reach: %w; "+
			"install them where every user can traverse", bin.dir, err)
	}
	if opts.Dir != "" {
		if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
			return nil, fmt.Errorf("integration: %w", err)
		}
	}
	dir := opts.Dir
	if opts.Keep {
		if err := checkKeptIdle(dir); err != nil {
			return nil, err
		}
	} else if dir, err = os.MkdirTemp(opts.Dir, "pgr"); err != nil {
		return nil, fmt.Errorf("integration: %w", err)
	}
	s := &localServers{bin: bin, acct: acct, dir: dir, keep: opts.Keep, logf: opts.Logf, procs: map[int]*localNode{}}
	fail := func(err error) (*localServers, error) {
		if !s.keep {
			_ = os.RemoveAll(dir)
		}
		return nil, err
	}
	if s.dir, err = filepath.Abs(dir); err != nil {
		return fail(fmt.Errorf("integration: %w", err))
	}
	// The server user must reach the node directories inside dir.
	if err := os.Chmod(dir, 0o755); err != nil {
		return fail(fmt.Errorf("integration: %w", err))
	}
	if err := acct.canReach(s.dir); err != nil {
		return fail(fmt.Errorf("integration: %w; use an Options.Dir that every user can traverse, such as one under %s",
			err, os.TempDir()))
	}
	keep := ""
	if s.keep {
		keep = "keep"
	}
	s.dog = startWatchdog(localWatchdogScript, s.dir, keep)
	return s, nil
}

// checkKeptIdle fails when a server of a cluster kept in dir runs: Start
// must neither start a second one on the same data nor, failing, stop it.
func checkKeptIdle(dir string) error {
	datas, _ := filepath.Glob(filepath.Join(dir, "n*", "data"))
	for _, data := range datas {
		real, err := filepath.EvalSymlinks(data)
		if err != nil {
			continue
		}
		if pids := serverProcs(real, readPid(data)); len(pids) > 0 {
			return fmt.Errorf("integration: %s is in use: a server (pid %d) runs on %s", dir, pids[0], data)
		}
	}
	return nil
}

// kept reports whether p holds the data of a kept cluster to start again
// rather than create.
func (s *localServers) kept(p *localNode) bool {
	if !s.keep {
		return false
	}
	_, err := os.Stat(filepath.Join(p.data, "PG_VERSION"))
	return err == nil
}

func (s *localServers) describe() string {
	clone := "pg_basebackup"
	if !s.bin.basebackup || cloneByCopy {
		clone = "an online file copy"
	}
	return fmt.Sprintf("PostgreSQL %d from %s, running as %s, in %s, replicas cloned with %s",
		s.bin.major, s.bin.dir, s.acct.name, s.dir, clone)
}

func (s *localServers) major() int { return s.bin.major }

func (s *localServers) runtime() string { return RuntimeLocal }

func (s *localServers) clusterDir() string { return s.dir }

func (s *localServers) peerAddr(n *node) (string, int) { return "127.0.0.1", n.port }

// proc returns the local state of n.
func (s *localServers) proc(n *node) *localNode {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.procs[n.index]
}

// newProc creates the directory of node n.
func (s *localServers) newProc(n *node) (*localNode, error) {
	dir := filepath.Join(s.dir, "n"+strconv.Itoa(n.index))
	if err := os.Mkdir(dir, 0o700); err != nil && !(s.keep && errors.Is(err, fs.ErrExist)) {
		return nil, fmt.Errorf("integration: %w", err)
	}
	if err := s.acct.chown(dir); err != nil {
		return nil, fmt.Errorf("integration: %w", err)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, fmt.Errorf("integration: %w", err)
	}
	p := &localNode{
		dir:     dir,
		data:    filepath.Join(dir, "data"),
		real:    filepath.Join(real, "data"),
		logPath: filepath.Join(dir, "postgres.log"),
	}
	s.mu.Lock()
	s.procs[n.index] = p
	s.mu.Unlock()
	return p, nil
}

func (s *localServers) createPrimary(ctx context.Context, n *node, conf []string, hba string) error {
	p, err := s.newProc(n)
	if err != nil {
		return err
	}
	if s.kept(p) {
		s.logf("integration: starting the kept primary in %s", p.data)
		return s.startNew(ctx, n, p)
	}
	if err := s.prepareData(p); err != nil {
		return err
	}
	if err := s.initData(ctx, p); err != nil {
		return err
	}
	if err := appendFile(filepath.Join(p.data, "postgresql.conf"), strings.Join(conf, "\n")+"\n"); err != nil {
		return err
	}
	if err := s.writeConf(n, "pg_hba.conf", hba); err != nil {
		return err
	}
	return s.startNew(ctx, n, p)
}

func (s *localServers) createReplica(ctx context.Context, n, upstream *node, conninfo string) error {
	p, err := s.newProc(n)
	if err != nil {
		return err
	}
	if s.kept(p) {
		// It follows the primary on whatever port it has now.
		s.logf("integration: starting the kept replica in %s", p.data)
		if err := follow(s, n, conninfo); err != nil {
			return err
		}
		return s.startNew(ctx, n, p)
	}
	if err := s.prepareData(p); err != nil {
		return err
	}
	if !s.bin.basebackup || cloneByCopy {
		return s.cloneReplica(ctx, n, upstream, p, conninfo)
	}
	host, port := s.peerAddr(upstream)
	if _, err := s.run(ctx, "pg_basebackup", "-h", host, "-p", strconv.Itoa(port),
		"-U", "postgres", "-w", "-D", p.data, "-X", "stream", "-c", "fast", "--no-sync"); err != nil {
		return err
	}
	if err := follow(s, n, conninfo); err != nil {
		return err
	}
	return s.startNew(ctx, n, p)
}

// prepareData removes what an interrupted creation of a kept node left in
// its data directory, which initdb and pg_basebackup want missing or empty.
func (s *localServers) prepareData(p *localNode) error {
	if !s.keep {
		return nil
	}
	if err := os.RemoveAll(p.data); err != nil {
		return fmt.Errorf("integration: %w", err)
	}
	return nil
}

func (s *localServers) readConf(n *node, name string) ([]byte, error) {
	return os.ReadFile(filepath.Join(s.proc(n).data, name))
}

// writeConf writes a file inside a data directory, owned by the server user.
func (s *localServers) writeConf(n *node, name, content string) error {
	path := filepath.Join(s.proc(n).data, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		return fmt.Errorf("integration: %w", err)
	}
	if err := s.acct.chown(path); err != nil {
		return fmt.Errorf("integration: %w", err)
	}
	return nil
}

// startNew starts a node for the first time, moving it to another free port
// when its port was taken in the meantime.
func (s *localServers) startNew(ctx context.Context, n *node, p *localNode) error {
	return onFreePort(n, s.logf, func() (bool, error) {
		from := fileSize(p.logPath)
		err := s.start(ctx, n)
		return portTaken(p.logPath, from), err
	})
}

// start starts n's postmaster with pg_ctl and waits until it accepts
// connections (a standby: until it reached consistency).
func (s *localServers) start(ctx context.Context, n *node) error {
	p := s.proc(n)
	// A postmaster.pid that no process backs up is stale (the server
	// crashed); its pid may even belong to a zombie, which the new
	// postmaster would take for a live one.
	if len(serverProcs(p.real, readPid(p.data))) == 0 {
		_ = os.Remove(filepath.Join(p.data, "postmaster.pid"))
	}
	_, err := s.run(ctx, "pg_ctl", "start", "-w", "-t", ctlTimeout(ctx), "-D", p.data,
		"-l", p.logPath, "-o", "-p "+strconv.Itoa(n.port))
	if err != nil {
		// pg_ctl may have given up while the postmaster lives on.
		_ = s.killProc(n, p, readPid(p.data))
		return err // it names the data directory and the port
	}
	pid := readPid(p.data)
	if pid <= 0 {
		return fmt.Errorf("integration: node %d started but %s/postmaster.pid names no pid", n.index, p.data)
	}
	s.mu.Lock()
	p.pid, p.crashed = pid, false
	s.mu.Unlock()
	return nil
}

// stop sends SIGINT (fast shutdown) or SIGQUIT (immediate) to n's
// postmaster and waits until all of its processes have exited.
func (s *localServers) stop(ctx context.Context, n *node, immediate bool) error {
	p := s.proc(n)
	s.mu.Lock()
	pid := p.pid
	s.mu.Unlock()
	if pid == 0 {
		return nil
	}
	sig := syscall.SIGINT
	if immediate {
		sig = syscall.SIGQUIT
	}
	if err := signalProcess(pid, sig); err != nil {
		return fmt.Errorf("integration: signalling node %d (pid %d): %w", n.index, pid, err)
	}
	err := poll(ctx, fmt.Sprintf("node %d (pid %d) to exit", n.index, pid), func(context.Context) (bool, string, error) {
		left := serverProcs(p.real, pid)
		return len(left) == 0, fmt.Sprintf("processes %v remain", left), nil
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	p.pid = 0
	s.mu.Unlock()
	return nil
}

func (s *localServers) kill(n *node) error {
	p := s.proc(n)
	s.mu.Lock()
	pid := p.pid
	s.mu.Unlock()
	return s.killProc(n, p, pid)
}

// killProc crashes n: it sends SIGKILL to its postmaster pm (so that it
// forks no more) and then to every process of the server until none is
// left. It then removes postmaster.pid, which a crash leaves behind: where
// init does not reap orphans the dead postmaster stays a zombie, and the
// next postmaster would take it for a live one.
func (s *localServers) killProc(n *node, p *localNode, pm int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	found := len(serverProcs(p.real, pm)) > 0
	_ = signalProcess(pm, syscall.SIGKILL)
	err := poll(ctx, fmt.Sprintf("node %d (pid %d) to die", n.index, pm), func(context.Context) (bool, string, error) {
		left := serverProcs(p.real, pm)
		for _, pid := range left {
			_ = signalProcess(pid, syscall.SIGKILL)
		}
		return len(left) == 0, fmt.Sprintf("processes %v remain", left), nil
	})
	if err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(p.data, "postmaster.pid")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("integration: %w", err)
	}
	s.mu.Lock()
	p.pid = 0
	p.crashed = p.crashed || found
	s.mu.Unlock()
	return nil
}

func (s *localServers) alive(n *node) bool {
	p := s.proc(n)
	return len(serverProcs(p.real, readPid(p.data))) > 0
}

func (s *localServers) pid(n *node) (int, error) {
	p := s.proc(n)
	s.mu.Lock()
	pid := p.pid
	s.mu.Unlock()
	if pid == 0 {
		return 0, fmt.Errorf("integration: node %d has no postmaster", n.index)
	}
	return pid, nil
}

func (s *localServers) logTail(n *node, lines int) (string, string) {
	p := s.proc(n)
	if p == nil {
		return "", ""
	}
	return p.logPath, logTail(p.logPath, lines)
}

// close stops every server for good, removes the cluster's directory (of
// a kept cluster: its initdb template only) and releases the watchdog.
func (s *localServers) close(nodes []*node) error {
	var wg sync.WaitGroup
	for _, n := range nodes {
		if s.proc(n) == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.shutdown(n)
		}()
	}
	wg.Wait()
	s.dropTemplate()
	var err error
	if s.keep {
		err = os.RemoveAll(filepath.Join(s.dir, templateDir))
	} else {
		err = os.RemoveAll(s.dir)
	}
	s.dog.stop()
	if err != nil {
		return fmt.Errorf("integration: removing %s: %w", s.dir, err)
	}
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
func (s *localServers) shutdown(n *node) {
	p := s.proc(n)
	s.mu.Lock()
	if p.pid == 0 && len(serverProcs(p.real, readPid(p.data))) > 0 {
		p.pid = readPid(p.data)
	}
	crashed := p.crashed && p.pid == 0
	s.mu.Unlock()
	if crashed {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		_ = s.start(ctx, n)
		cancel()
	}
	s.mu.Lock()
	pid := p.pid
	s.mu.Unlock()
	if pid == 0 {
		return
	}
	// A kept cluster shuts down cleanly (fast mode), so that it starts
	// again without crash recovery.
	grace := 5 * time.Second
	if s.keep {
		grace = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if s.stop(ctx, n, !s.keep) != nil {
		_ = s.killProc(n, p, pid)
	}
}

// run executes a server tool as the server user, in the cluster directory,
// with a clean environment (no PG* variables, C locale). The error quotes
// the tool's output.
func (s *localServers) run(ctx context.Context, tool string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, s.bin.path(tool), args...)
	cmd.Dir = s.dir
	cmd.Env = s.env()
	cmd.SysProcAttr = s.acct.sysProcAttr()
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
func (s *localServers) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PG") || strings.HasPrefix(k, "LC_") || k == "LANG" || k == "HOME" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C", "LANG=C", "HOME="+s.dir)
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
	return lastLines(string(b), n)
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n") + "\n"
}

// freeze sends SIGSTOP (or SIGCONT) to the postmaster and then to every
// process of the server: the postmaster first, so that it starts no
// process that would escape.
func (s *localServers) freeze(n *node, frozen bool) error {
	sig := syscall.SIGCONT
	if frozen {
		sig = syscall.SIGSTOP
	}
	p := s.proc(n)
	s.mu.Lock()
	pm := p.pid
	s.mu.Unlock()
	if err := signalProcess(pm, sig); err != nil {
		return err
	}
	for _, pid := range serverProcs(p.real, pm) {
		if err := signalProcess(pid, sig); err != nil {
			return err
		}
	}
	return nil
}
