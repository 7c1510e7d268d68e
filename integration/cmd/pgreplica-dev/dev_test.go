package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica/integration"
)

// devProc is pgreplica-dev running in-process, as main runs it, with a
// pipe for its keys and its output collected line by line.
type devProc struct {
	t      *testing.T
	cancel context.CancelFunc
	keys   *io.PipeWriter
	done   chan int // the exit code, once run returned

	mu      sync.Mutex
	lines   []string
	stderr  bytes.Buffer
	changed chan struct{} // a token whenever lines grew or run returned
}

func startDev(t *testing.T, args ...string) *devProc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	outR, outW := io.Pipe()
	keyR, keyW := io.Pipe()
	p := &devProc{t: t, cancel: cancel, keys: keyW, done: make(chan int, 1), changed: make(chan struct{}, 1)}
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
			p.signal()
		}
		_, _ = io.Copy(io.Discard, outR)
	}()
	go func() {
		code := run(ctx, args, keyR, outW, lockedWriter{&p.mu, &p.stderr})
		outW.Close()
		keyR.Close()
		<-scanned // every line is in p.lines before done says it ended
		p.done <- code
		p.signal()
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-p.done:
		case <-time.After(time.Minute):
			t.Error("pgreplica-dev did not stop within a minute of its cancellation")
		}
		t.Logf("pgreplica-dev output:\n%s\nstderr:\n%s", p.output(), p.stderrText())
	})
	return p
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func (p *devProc) signal() {
	select {
	case p.changed <- struct{}{}:
	default:
	}
}

func (p *devProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

func (p *devProc) stderrText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// waitLine returns the first line at or after line from that contains
// want, and the index after it. It fails t when dev exits first; when dev
// could not start for want of PostgreSQL, it skips t instead (unless
// PGREPLICA_INTEGRATION=require).
func (p *devProc) waitLine(from int, want string) (string, int) {
	p.t.Helper()
	deadline := time.After(2 * time.Minute)
	for {
		p.mu.Lock()
		for i := from; i < len(p.lines); i++ {
			if strings.Contains(p.lines[i], want) {
				line := p.lines[i]
				p.mu.Unlock()
				return line, i + 1
			}
		}
		p.mu.Unlock()
		select {
		case code := <-p.done:
			p.done <- code // for Cleanup
			stderr := p.stderrText()
			if strings.Contains(stderr, integration.ErrNoPostgres.Error()) && os.Getenv(integration.RequireEnv) != "require" {
				p.t.Skipf("no PostgreSQL here: %s", stderr)
			}
			p.t.Fatalf("pgreplica-dev exited (%d) before printing %q\n%s\n%s", code, want, p.output(), stderr)
		case <-deadline:
			p.t.Fatalf("pgreplica-dev printed no %q within 2 minutes", want)
		case <-p.changed:
		}
	}
}

// stop cancels dev as Ctrl-C does and returns its exit code.
func (p *devProc) stop() int {
	p.t.Helper()
	p.cancel()
	select {
	case code := <-p.done:
		p.done <- code
		return code
	case <-time.After(time.Minute):
		p.t.Fatal("pgreplica-dev did not stop within a minute")
		return 0
	}
}

// devBanner is what dev printed about its cluster.
type devBanner struct {
	dsn      string
	dir      string
	primary  string   // the primary's own DSN
	replicas []string // replicas[i-1] is replica i's own DSN
	next     int      // the line after the banner
}

func (p *devProc) banner(replicas int) devBanner {
	p.t.Helper()
	var b devBanner
	line, _ := p.waitLine(0, "Data and server logs: ")
	b.dir, _, _ = strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "Data and server logs: "), " (")
	line, b.next = p.waitLine(0, "export PGREPLICA_DSN='")
	b.dsn = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(line), "export PGREPLICA_DSN='"), "'")
	line, b.next = p.waitLine(b.next, "primary    postgres://")
	b.primary = strings.Fields(line)[1]
	for i := 1; i <= replicas; i++ {
		line, b.next = p.waitLine(b.next, fmt.Sprintf("replica %d  postgres://", i))
		b.replicas = append(b.replicas, strings.Fields(line)[2])
	}
	return b
}

// devCtl runs "pgreplica-dev args..." as another terminal does and
// returns its output; it fails t unless the exit code is want.
func devCtl(t *testing.T, want int, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := run(testCtx(t, time.Minute), args, nil, &out, &errOut); code != want {
		t.Fatalf("pgreplica-dev %s = %d, want %d\n%s%s", strings.Join(args, " "), code, want, out.String(), errOut.String())
	}
	return out.String() + errOut.String()
}

// await polls cond until it holds, failing t after a minute.
func await(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ok, err := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s (last error: %v)", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func queryString(db *sql.DB, q string, args ...any) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var s string
	err := db.QueryRowContext(ctx, q, args...).Scan(&s)
	return s, err
}

func openDB(t *testing.T, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestDevEndToEnd runs pgreplica-dev, connects with the DSN it prints,
// pauses and resumes a replica and changes another's lag from "another
// terminal" and with keys, then stops it as Ctrl-C does: no server and
// no directory of the cluster may be left.
func TestDevEndToEnd(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	p := startDev(t, "-replicas", "2", "-lag", "0s", "-every", "100ms")
	b := p.banner(2)
	statePath, err := devStatePath("")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(statePath); err != nil {
		t.Fatalf("no state file while dev runs: %v", err)
	}

	ctx := testCtx(t, 2*time.Minute)
	db := openDB(t, "pgreplica", b.dsn)
	for _, q := range []string{
		"CREATE TABLE dev_t (id int PRIMARY KEY, v text)",
		"INSERT INTO dev_t VALUES (1, 'one')",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if v, err := queryString(db, "SELECT v FROM dev_t WHERE id = 1"); err != nil || v != "one" {
		t.Fatalf("read through pgreplica: %q, %v", v, err)
	}

	// Pause replica 1 from another terminal: it receives the next write
	// but does not show it; pgreplica still reads its own write.
	r1 := openDB(t, "pgx", b.replicas[0])
	await(t, "replica 1 to show the first row", func() (bool, error) {
		n, err := queryString(r1, "SELECT count(*)::text FROM dev_t WHERE id = 1")
		return n == "1", err
	})
	if out := devCtl(t, exitOK, "pause", "1"); !strings.Contains(out, "replica 1: replay paused") {
		t.Fatalf("pause printed %q", out)
	}
	if got, err := queryString(r1, "SELECT pg_is_wal_replay_paused()::text"); err != nil || got != "true" {
		t.Fatalf("replica 1 paused: %q, %v", got, err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO dev_t VALUES (2, 'two')"); err != nil {
		t.Fatal(err)
	}
	if v, err := queryString(db, "SELECT v FROM dev_t WHERE id = 2"); err != nil || v != "two" {
		t.Fatalf("read-your-writes through pgreplica while replica 1 is paused: %q, %v", v, err)
	}
	primary := openDB(t, "pgx", b.primary)
	lsn, err := queryString(primary, "SELECT pg_current_wal_lsn()::text")
	if err != nil {
		t.Fatal(err)
	}
	await(t, "replica 1 to receive the second row", func() (bool, error) {
		got, err := queryString(r1, "SELECT (pg_last_wal_receive_lsn() >= $1::pg_lsn)::text", lsn)
		return got == "true", err
	})
	if n, err := queryString(r1, "SELECT count(*)::text FROM dev_t WHERE id = 2"); err != nil || n != "0" {
		t.Fatalf("paused replica 1 shows the row written after the pause: count %q, %v", n, err)
	}
	devCtl(t, exitOK, "resume", "1")
	await(t, "resumed replica 1 to show the second row", func() (bool, error) {
		n, err := queryString(r1, "SELECT count(*)::text FROM dev_t WHERE id = 2")
		return n == "1", err
	})

	// Lag of replica 2 from another terminal, then with keys.
	r2 := openDB(t, "pgx", b.replicas[1])
	devCtl(t, exitOK, "lag", "2", "300ms")
	if got, err := queryString(r2, "SHOW recovery_min_apply_delay"); err != nil || got != "300ms" {
		t.Fatalf("replica 2 recovery_min_apply_delay = %q, %v; want 300ms", got, err)
	}
	if out := devCtl(t, exitOK, "status"); !strings.Contains(out, "replica 2: delay 300ms") {
		t.Fatalf("status printed %q", out)
	}
	if _, err := io.WriteString(p.keys, "2\n+\n"); err != nil {
		t.Fatal(err)
	}
	_, next := p.waitLine(b.next, "replica 2 now applies WAL 600ms")
	if got, err := queryString(r2, "SHOW recovery_min_apply_delay"); err != nil || got != "600ms" {
		t.Fatalf("after +, replica 2 recovery_min_apply_delay = %q, %v; want 600ms", got, err)
	}
	if _, err := io.WriteString(p.keys, "p\n"); err != nil {
		t.Fatal(err)
	}
	_, next = p.waitLine(next, "replica 2: replay paused")
	if _, err := io.WriteString(p.keys, "p\n"); err != nil {
		t.Fatal(err)
	}
	_, next = p.waitLine(next, "replica 2: replay resumed")
	p.waitLine(next, "replica 1: delay 0s, behind") // the periodic lag line

	// A second dev finds the first and refuses.
	if out := devCtl(t, exitFail); !strings.Contains(out, "already running") {
		t.Fatalf("a second dev printed %q", out)
	}

	db.Close()
	if code := p.stop(); code != exitOK {
		t.Fatalf("dev exited %d after Ctrl-C", code)
	}
	p.waitLine(0, "removed.")
	assertGone(t, b, statePath)
	if out := devCtl(t, exitFail, "status"); !strings.Contains(out, "no pgreplica dev is running") {
		t.Fatalf("status after the end printed %q", out)
	}
}

// assertGone checks that nothing of a stopped dev is left: no state file,
// no cluster directory, no server process working in it, no port open.
func assertGone(t *testing.T, b devBanner, statePath string) {
	t.Helper()
	if _, err := os.Stat(statePath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state file %s left behind: %v", statePath, err)
	}
	if b.dir != "" {
		if _, err := os.Stat(b.dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cluster directory %s left behind: %v", b.dir, err)
		}
	}
	assertNoServers(t, b)
}

// assertNoServers checks that no server of the cluster runs.
func assertNoServers(t *testing.T, b devBanner) {
	t.Helper()
	hosts := strings.Split(strings.SplitN(strings.SplitN(b.dsn, "@", 2)[1], "/", 2)[0], ",")
	for _, h := range hosts {
		if c, err := net.DialTimeout("tcp", h, time.Second); err == nil {
			c.Close()
			t.Errorf("%s still accepts connections", h)
		}
	}
	if runtime.GOOS != "linux" || b.dir == "" {
		return
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range procs {
		cmdline, err := os.ReadFile(f)
		if err == nil && bytes.Contains(cmdline, []byte(b.dir)) {
			t.Errorf("a process still names %s: %s", b.dir, bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
		}
	}
}

// TestDevKeepsDir runs dev with -dir: a second dev on the directory
// refuses while the first runs, the data stays after Ctrl-C, and the next
// dev on it starts the same cluster again.
func TestDevKeepsDir(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	parent, err := os.MkdirTemp("", "pgreplica-devtest")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	// The servers run as another user when the tests run as root.
	if err := os.Chmod(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(parent, "cluster")

	p := startDev(t, "-dir", dir, "-replicas", "1", "-every", "0")
	b := p.banner(1)
	if b.dir != dir {
		t.Fatalf("the cluster lives in %q, want %q", b.dir, dir)
	}
	db := openDB(t, "pgreplica", b.dsn)
	if _, err := db.Exec("CREATE TABLE kept (v text); INSERT INTO kept VALUES ('still here')"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if out := devCtl(t, exitFail, "-dir", dir); !strings.Contains(out, "already running") {
		t.Fatalf("a second dev on the same -dir printed %q", out)
	}
	if code := p.stop(); code != exitOK {
		t.Fatalf("dev exited %d after Ctrl-C", code)
	}
	p.waitLine(0, "its data stays in "+dir)
	assertNoServers(t, devBanner{dsn: b.dsn})
	if _, err := os.Stat(filepath.Join(dir, "n0", "data", "PG_VERSION")); err != nil {
		t.Fatalf("the data did not stay: %v", err)
	}

	again := startDev(t, "-dir", dir, "-replicas", "1", "-lag", "0s", "-every", "0")
	b = again.banner(1)
	r1 := openDB(t, "pgx", b.replicas[0])
	await(t, "the kept row on replica 1", func() (bool, error) {
		v, err := queryString(r1, "SELECT v FROM kept")
		return v == "still here", err
	})
	r1.Close()
	if code := again.stop(); code != exitOK {
		t.Fatalf("dev exited %d after Ctrl-C", code)
	}
	assertNoServers(t, devBanner{dsn: b.dsn})
}
