package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// proxyProcess is one proxy program (PgBouncer, HAProxy) that the harness
// runs as a process of its own on a port of 127.0.0.1, in a directory of
// its own that holds its configuration, its log (the program's standard
// output and error) and its pid. It can be stopped and started again on
// the same port. A watchdog kills it and removes the directory if the test
// binary dies without calling close.
type proxyProcess struct {
	name    string // the program's name, for messages
	bin     string
	args    []string // arguments after the binary; they name files in dir
	dir     string   // absolute, without symbolic links
	logPath string
	acct    account // who it runs as
	dog     *watchdog

	mu     sync.Mutex
	port   int
	cmd    *exec.Cmd
	exited chan struct{} // closed once the current process has exited
	closed bool
}

// proxyWatchdogScript runs as /bin/sh -c script sh <dir>. It kills the
// process whose pid dir/pid records, if it still works in dir, and removes
// dir.
const proxyWatchdogScript = `
cat >/dev/null 2>&1
if [ -f "$1/pid" ]; then
	p=$(cat "$1/pid")
	case "$p" in ''|*[!0-9]*) ;; *)
		if [ ! -d /proc/self ] || [ "$(readlink "/proc/$p/cwd" 2>/dev/null)" = "$1" ]; then
			kill -KILL "$p" 2>/dev/null
		fi ;;
	esac
fi
rm -rf "$1"
`

// proxyStartTimeout bounds a proxy's start when ctx has no deadline.
const proxyStartTimeout = 10 * time.Second

// proxyPoll is how often a start checks whether the proxy listens: a
// restart's downtime is measured at this resolution.
const proxyPoll = time.Millisecond

// newProxyProcess creates the directory of a proxy that will run bin as
// acct with args, in which "{dir}" stands for that directory.
func newProxyProcess(name, bin string, acct account, args ...string) (*proxyProcess, error) {
	dir, err := os.MkdirTemp("", "pgr-"+name)
	if err != nil {
		return nil, fmt.Errorf("integration: %s: %w", name, err)
	}
	if dir, err = filepath.EvalSymlinks(dir); err == nil {
		dir, err = filepath.Abs(dir)
	}
	if err == nil {
		err = os.Chmod(dir, 0o755) // readable by acct
	}
	if err == nil {
		err = acct.canReach(dir)
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("integration: %s: %w", name, err)
	}
	p := &proxyProcess{name: name, bin: bin, dir: dir, logPath: filepath.Join(dir, name+".log"), acct: acct}
	for _, a := range args {
		p.args = append(p.args, strings.ReplaceAll(a, "{dir}", dir))
	}
	p.dog = startWatchdog(proxyWatchdogScript, dir)
	return p, nil
}

// writeFile writes a file of the proxy's directory, readable by all.
func (p *proxyProcess) writeFile(name, content string) error {
	if err := os.WriteFile(filepath.Join(p.dir, name), []byte(content), 0o644); err != nil {
		return fmt.Errorf("integration: %s: %w", p.name, err)
	}
	return nil
}

// launch starts the proxy on a free port, moving to another one when the
// port was taken meanwhile (up to five times). configure writes its
// configuration for a port.
func (p *proxyProcess) launch(ctx context.Context, configure func(port int) error) error {
	for attempt := 1; ; attempt++ {
		port, err := reservePort()
		if err != nil {
			return err
		}
		if err := configure(port); err != nil {
			releasePort(port)
			return err
		}
		p.mu.Lock()
		p.port = port
		p.mu.Unlock()
		from := fileSize(p.logPath)
		err = p.start(ctx)
		if err == nil {
			return nil
		}
		p.mu.Lock()
		p.port = 0 // released: close must not release it again
		p.mu.Unlock()
		releasePort(port)
		if attempt == 5 || !p.portTaken(from) {
			return err
		}
	}
}

// portTaken reports whether the log since offset from says the proxy
// could not bind its port.
func (p *proxyProcess) portTaken(from int64) bool {
	b, err := os.ReadFile(p.logPath)
	if err != nil || int64(len(b)) < from {
		return false
	}
	s := string(b[from:])
	return strings.Contains(s, "in use") || strings.Contains(s, "cannot bind") || strings.Contains(s, "could not bind")
}

// addr is the proxy's host:port.
func (p *proxyProcess) addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port))
}

// start starts the program and returns once it accepts connections on
// its port; it fails, quoting its log, if the program exits first.
func (p *proxyProcess) start(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, proxyStartTimeout)
		defer cancel()
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return fmt.Errorf("integration: %s is closed", p.name)
	}
	if p.cmd != nil {
		p.mu.Unlock()
		return fmt.Errorf("integration: %s is running", p.name)
	}
	log, err := os.OpenFile(p.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		p.mu.Unlock()
		return fmt.Errorf("integration: %s: %w", p.name, err)
	}
	defer log.Close() // the child has its own copy
	cmd := exec.Command(p.bin, p.args...)
	cmd.Dir = p.dir
	cmd.Env = proxyEnv()
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = p.acct.sysProcAttr()
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = ownGroup()
	} else if g := ownGroup(); g != nil {
		// A process group of its own, out of reach of a Ctrl-C aimed at
		// the tests: the watchdog and Close stop it.
		cmd.SysProcAttr.Setpgid = g.Setpgid
	}
	if err := cmd.Start(); err != nil {
		p.mu.Unlock()
		return fmt.Errorf("integration: starting %s: %w", p.name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	p.cmd, p.exited = cmd, exited
	port := p.port
	p.mu.Unlock()
	_ = os.WriteFile(filepath.Join(p.dir, "pid"), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644)

	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	tick := time.NewTicker(proxyPoll)
	defer tick.Stop()
	for {
		select {
		case <-exited:
			p.forget(cmd)
			return p.withLog(fmt.Errorf("integration: %s exited at start on %s", p.name, addr))
		default:
		}
		if p.listening(ctx, addr) {
			return nil
		}
		select {
		case <-ctx.Done():
			_ = p.stop(syscall.SIGKILL, time.Second)
			return p.withLog(fmt.Errorf("integration: waiting for %s to listen on %s: %w", p.name, addr, context.Cause(ctx)))
		case <-tick.C:
		}
	}
}

// listening reports whether something accepts TCP connections at addr.
// The proxy may be still binding, or, on a restart, the port still free.
func (p *proxyProcess) listening(ctx context.Context, addr string) bool {
	dctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	c, err := (&net.Dialer{}).DialContext(dctx, "tcp", addr)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// forget clears cmd as the current process once it has exited.
func (p *proxyProcess) forget(cmd *exec.Cmd) {
	p.mu.Lock()
	if p.cmd == cmd {
		p.cmd, p.exited = nil, nil
	}
	p.mu.Unlock()
}

// stop sends sig to the running process and waits until it has exited,
// killing it after grace. It does nothing when no process runs.
func (p *proxyProcess) stop(sig syscall.Signal, grace time.Duration) error {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	if err := signalProcess(cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("integration: signalling %s (pid %d): %w", p.name, cmd.Process.Pid, err)
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-exited:
	case <-t.C:
		_ = signalProcess(cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}
	p.forget(cmd)
	return nil
}

// restart stops the process with sig and starts it again on the same
// port; it returns how long the port did not accept connections (from the
// signal until the new process listened).
func (p *proxyProcess) restart(ctx context.Context, sig syscall.Signal, down time.Duration) (time.Duration, error) {
	began := time.Now()
	if err := p.stop(sig, 5*time.Second); err != nil {
		return 0, err
	}
	if down > 0 {
		// The outage itself: the port refuses connections meanwhile.
		select {
		case <-time.After(down):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	if err := p.start(ctx); err != nil {
		return 0, err
	}
	return time.Since(began), nil
}

// running reports whether the proxy's process runs.
func (p *proxyProcess) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil
}

// close stops the process for good (SIGKILL after grace), removes the
// directory and releases the port. It may be called more than once.
func (p *proxyProcess) close(sig syscall.Signal) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	port := p.port
	p.mu.Unlock()
	err := p.stop(sig, 5*time.Second)
	if rerr := os.RemoveAll(p.dir); rerr != nil {
		err = errors.Join(err, fmt.Errorf("integration: removing %s: %w", p.dir, rerr))
	}
	p.dog.stop()
	if port != 0 {
		releasePort(port)
	}
	return err
}

// withLog appends the end of the proxy's log to err.
func (p *proxyProcess) withLog(err error) error {
	if tail := logTail(p.logPath, 20); tail != "" {
		return fmt.Errorf("%w\n--- end of %s ---\n%s", err, p.logPath, tail)
	}
	return err
}

// proxyEnv is the environment of a proxy program: ours without the
// variables that steer libpq, in the C locale.
func proxyEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PG") || strings.HasPrefix(k, "LC_") || k == "LANG" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C", "LANG=C")
}

// findProgram locates a proxy program: $env if set (which must name an
// executable), else name on PATH, else the given usual places. The error
// wraps missing.
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
	return "", fmt.Errorf("%w (not on PATH, nor in %s; %s names another)", missing, strings.Join(usual, ", "), env)
}

// currentAccount is this process's own identity: proxies that may run as
// root run as we do.
func currentAccount() (account, error) {
	name := strconv.Itoa(os.Geteuid())
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	return account{name: name, uid: os.Geteuid(), gid: os.Getegid()}, nil
}

// startForTest starts a proxy for t and closes it when t ends; a missing
// program (missing) skips t, or fails it under PGREPLICA_INTEGRATION=require.
func startForTest[P interface{ Close() error }](t testing.TB, start func(context.Context) (P, error), missing error) P {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), proxyStartTimeout)
	defer cancel()
	p, err := start(ctx)
	if err != nil {
		needProgram(t, err, missing)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}
