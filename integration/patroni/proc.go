//go:build linux

package patroni

import (
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
	"time"
)

// account is an OS identity a process runs as.
type account struct {
	name     string
	uid, gid int
	switched bool // it differs from ours: the process needs setuid
}

// serverAccount is who runs Patroni and PostgreSQL: ourselves, unless we
// are root, then the OS user postgres (PostgreSQL refuses to run as root).
func serverAccount() (account, error) {
	if os.Geteuid() != 0 {
		name := strconv.Itoa(os.Geteuid())
		if u, err := user.Current(); err == nil {
			name = u.Username
		}
		return account{name: name, uid: os.Geteuid(), gid: os.Getegid()}, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return account{}, errors.New("patroni: running as root and the OS user postgres does not exist; " +
			"PostgreSQL refuses to run as root (install the postgresql package, which creates it)")
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil || uid == 0 {
		return account{}, fmt.Errorf("patroni: the OS user postgres has uid %q, gid %q", u.Uid, u.Gid)
	}
	return account{name: "postgres", uid: uid, gid: gid, switched: true}, nil
}

// self is this process's own identity.
func self() account {
	return account{name: strconv.Itoa(os.Geteuid()), uid: os.Geteuid(), gid: os.Getegid()}
}

// attrs runs a command as a, in a process group of its own (out of reach
// of a Ctrl-C aimed at the tests: Close and the watchdog stop it).
func (a account) attrs() *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true}
	if a.switched {
		attr.Credential = &syscall.Credential{Uid: uint32(a.uid), Gid: uint32(a.gid), Groups: []uint32{}}
	}
	return attr
}

// mkdir creates dir owned by a with mode perm.
func (a account) mkdir(dir string, perm os.FileMode) error {
	if err := os.MkdirAll(dir, perm); err != nil {
		return err
	}
	if err := os.Chmod(dir, perm); err != nil {
		return err
	}
	if a.switched {
		return os.Chown(dir, a.uid, a.gid)
	}
	return nil
}

// writeFile writes a file owned by a.
func (a account) writeFile(path, content string, perm os.FileMode) error {
	if err := os.WriteFile(path, []byte(content), perm); err != nil {
		return err
	}
	if a.switched {
		return os.Chown(path, a.uid, a.gid)
	}
	return nil
}

// proc is one long-running program of the cluster (etcd, a Patroni
// daemon, HAProxy): its standard output and error go to logPath, and its
// pid to pidPath, which the watchdog reads.
type proc struct {
	name    string
	logPath string
	pidPath string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// startProc starts bin with args as acct in dir with env.
func startProc(name, dir, logPath, pidPath string, acct account, env []string, bin string, args ...string) (*proc, error) {
	log, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("patroni: %s: %w", name, err)
	}
	defer log.Close() // the child has its own copy
	if acct.switched {
		_ = os.Chown(logPath, acct.uid, acct.gid)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = acct.attrs()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("patroni: starting %s: %w", name, err)
	}
	p := &proc{name: name, logPath: logPath, pidPath: pidPath, cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	_ = os.WriteFile(pidPath, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644)
	return p, nil
}

// pid is the process's id.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// running reports whether the process has not exited.
func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// signal sends sig to the process (nothing once it has exited).
func (p *proc) signal(sig syscall.Signal) error {
	if !p.running() {
		return nil
	}
	return signalPid(p.pid(), sig)
}

// stop sends sig and waits until the process has exited, killing it
// after grace.
func (p *proc) stop(sig syscall.Signal, grace time.Duration) {
	if !p.running() {
		return
	}
	_ = signalPid(p.pid(), syscall.SIGCONT) // a frozen process handles nothing
	_ = signalPid(p.pid(), sig)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		_ = signalPid(p.pid(), syscall.SIGKILL)
		<-p.exited
	}
	_ = os.Remove(p.pidPath)
}

// signalPid sends sig to pid; a process already gone is no error.
func signalPid(pid int, sig syscall.Signal) error {
	if pid <= 0 {
		return nil
	}
	if err := syscall.Kill(pid, sig); err != nil && err != syscall.ESRCH {
		return err
	}
	return nil
}

// procsIn returns the live processes whose current directory is dir, or
// (under) is inside it. Every PostgreSQL process works in its data
// directory, so these are a server's postmaster, backends and auxiliary
// processes, also once the postmaster is gone. Zombies have no current
// directory and are left out.
func procsIn(dir string, under bool) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if err != nil {
			continue
		}
		if cwd == dir || (under && strings.HasPrefix(cwd, dir+"/")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// postmasterPid reads the postmaster's pid from data/postmaster.pid, 0 if
// there is none or it is no live postmaster working in data.
func postmasterPid(data string) int {
	b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		return 0
	}
	if cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid)); err != nil || cwd != data {
		return 0
	}
	return pid
}

// watchdogScript runs as /bin/sh -c script sh <cluster dir>. When the test
// binary dies its pipe reaches end-of-file: it lets every process that
// works in the cluster's directory run (a frozen one handles no signal),
// kills the managers (Patroni, which would restart its server, etcd,
// HAProxy), shuts the servers down in immediate mode, kills what is left
// after five seconds and removes the directory.
const watchdogScript = `
cat >/dev/null 2>&1
d=$1
inside() {
	for p in /proc/[0-9]*; do
		c=$(readlink "$p/cwd" 2>/dev/null) || continue
		case "$c" in "$d"|"$d"/*) echo "${p#/proc/}" ;; esac
	done
}
pids=$(inside)
[ -n "$pids" ] && kill -CONT $pids 2>/dev/null
for f in "$d"/*.pid "$d"/*/*.pid; do
	[ -f "$f" ] || continue
	p=$(cat "$f")
	case "$p" in ''|*[!0-9]*) continue ;; esac
	case "$(readlink "/proc/$p/cwd" 2>/dev/null)" in "$d"|"$d"/*) kill -KILL "$p" 2>/dev/null ;; esac
done
for f in "$d"/*/data/postmaster.pid; do
	[ -f "$f" ] || continue
	p=$(head -n 1 "$f")
	case "$p" in ''|*[!0-9]*) continue ;; esac
	kill -QUIT "$p" 2>/dev/null
done
i=0
while [ $i -lt 50 ]; do
	pids=$(inside)
	[ -z "$pids" ] && break
	sleep 0.1 2>/dev/null || sleep 1
	i=$((i+1))
done
pids=$(inside)
[ -n "$pids" ] && kill -KILL $pids 2>/dev/null
rm -rf "$d"
`

// watchdog is a shell process that cleans up after a test binary that
// dies without calling Close (a panic in a test goroutine, -timeout).
type watchdog struct {
	cmd  *exec.Cmd
	pipe *os.File // write end: closing it lets the watchdog act
}

func startWatchdog(dir string) *watchdog {
	r, w, err := os.Pipe()
	if err != nil {
		return nil
	}
	defer r.Close()
	cmd := exec.Command("/bin/sh", "-c", watchdogScript, "sh", dir)
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil
	}
	return &watchdog{cmd: cmd, pipe: w}
}

// release lets the watchdog go after Close has cleaned up (it finds
// nothing left to do), and reaps it.
func (d *watchdog) release() {
	if d == nil {
		return
	}
	d.pipe.Close()
	_ = d.cmd.Wait()
}

// abandon stops the watchdog without letting it act (the directory
// stays), and reaps it.
func (d *watchdog) abandon() {
	if d == nil {
		return
	}
	_ = d.cmd.Process.Kill()
	_ = d.cmd.Wait()
	d.pipe.Close()
}

// Ports handed out in this process, so that two clusters never pick the
// same one.
var (
	portsMu sync.Mutex
	ports   = map[int]bool{}
)

// freePort returns a TCP port of 127.0.0.1 that nothing listened on a
// moment ago. Another process may take it before ours binds it.
func freePort() (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("patroni: finding a free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !ports[port] {
			ports[port] = true
			return port, nil
		}
	}
	return 0, errors.New("patroni: no free port found")
}

func releasePort(port int) {
	portsMu.Lock()
	delete(ports, port)
	portsMu.Unlock()
}

// logTail returns the last n lines of the file at path.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// cleanEnv is the environment of the cluster's programs: a fixed PATH,
// the C locale and a HOME of their own, nothing of ours (no PG* variable
// steering libpq, no Python of a version manager).
func cleanEnv(home string) []string {
	return []string{
		"PATH=/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
		"HOME=" + home,
		"LANG=C.UTF-8",
		"LC_ALL=C.UTF-8",
		"TZ=UTC",
	}
}
