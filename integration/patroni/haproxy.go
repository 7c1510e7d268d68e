//go:build linux

package patroni

import (
	"bufio"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pgreplica/pgreplica/integration"
)

// HAProxy's three ports, as Patroni's documentation configures them.
const (
	// Writer forwards to the member whose GET /primary answers 200: the
	// leader.
	Writer = "primary"
	// Reader forwards to the members whose GET /replica answers 200
	// (running replicas without the noloadbalance tag), round robin.
	Reader = "replicas"
	// ReaderLag is Reader with GET /replica?lag=Options.ReplicaLag:
	// replicas further behind the leader are taken out.
	ReaderLag = "replicas_lag"
)

// startHAProxy starts HAProxy in master-worker mode on three free ports
// and waits until its checks agree with Patroni.
func (c *Cluster) startHAProxy(ctx context.Context) error {
	var err error
	for _, p := range []*int{&c.writerPort, &c.readerPort, &c.readerLagPort} {
		if *p, err = freePort(); err != nil {
			return err
		}
	}
	dir := filepath.Join(c.dir, "haproxy")
	if err := self().mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("patroni: %w", err)
	}
	c.haproxyCfg = filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(c.haproxyCfg, []byte(c.haproxyConfig()), 0o644); err != nil {
		return fmt.Errorf("patroni: %w", err)
	}
	// -W: a master process that reloads its configuration on SIGUSR2
	// (existing connections stay with the old worker); -db: in the
	// foreground.
	c.haproxy, err = startProc("haproxy", dir, filepath.Join(c.dir, "haproxy.log"), filepath.Join(c.dir, "haproxy.pid"),
		self(), cleanEnv(dir), c.haproxyBin, "-W", "-db", "-f", c.haproxyCfg)
	if err != nil {
		return err
	}
	return c.WaitHAProxy(ctx)
}

// haproxyConfig is haproxy.cfg for the live members, written as Patroni's
// documentation shows (option httpchk on the REST port, on-marked-down
// shutdown-sessions), with a faster check interval.
func (c *Cluster) haproxyConfig() string {
	inter := max(c.opts.HAProxyCheck.Milliseconds(), 1)
	lines := []string{
		"# pgreplica integration harness: HAProxy with Patroni's checks",
		"global",
		"	maxconn 1000",
		"	stats socket " + filepath.Join(c.dir, "haproxy", "haproxy.sock") + " mode 600 level admin",
		"defaults",
		"	mode tcp",
		"	retries 2",
		"	timeout queue 5s",
		"	timeout connect 2s",
		"	timeout client 30m",
		"	timeout server 30m",
		"	timeout check 1s",
	}
	listen := func(name string, port int, check string, balance bool) {
		lines = append(lines,
			"listen "+name,
			fmt.Sprintf("	bind 127.0.0.1:%d", port),
			"	option httpchk GET "+check,
			"	http-check expect status 200",
			fmt.Sprintf("	default-server inter %dms fall 3 rise 2 on-marked-down shutdown-sessions", inter))
		if balance {
			lines = append(lines, "	balance roundrobin")
		}
		for _, i := range c.Live() {
			m := c.member(i)
			lines = append(lines, fmt.Sprintf("	server %s 127.0.0.1:%d maxconn 100 check port %d", m.name, m.pgPort, m.restPort))
		}
	}
	listen(Writer, c.writerPort, "/primary", false)
	listen(Reader, c.readerPort, "/replica", true)
	listen(ReaderLag, c.readerLagPort, "/replica?lag="+c.opts.ReplicaLag, true)
	return strings.Join(lines, "\n") + "\n"
}

// reloadHAProxy rewrites haproxy.cfg for the live members, reloads it
// (SIGUSR2 to the master) and waits until the new worker's checks agree
// with Patroni.
func (c *Cluster) reloadHAProxy(ctx context.Context) error {
	if c.haproxy == nil {
		return nil
	}
	if err := os.WriteFile(c.haproxyCfg, []byte(c.haproxyConfig()), 0o644); err != nil {
		return fmt.Errorf("patroni: %w", err)
	}
	before := strings.Count(logTail(c.haproxy.logPath, 1<<20), "Loading success")
	if err := c.haproxy.signal(syscall.SIGUSR2); err != nil {
		return fmt.Errorf("patroni: reloading haproxy: %w", err)
	}
	err := c.poll(ctx, "haproxy to reload", func(context.Context) (bool, string) {
		log := logTail(c.haproxy.logPath, 1<<20)
		return strings.Count(log, "Loading success") > before, logTail(c.haproxy.logPath, 5)
	})
	if err != nil {
		return err
	}
	return c.WaitHAProxy(ctx)
}

// HAProxyAddr is the host:port of one of HAProxy's ports: Writer, Reader
// or ReaderLag. It panics when the cluster runs no HAProxy.
func (c *Cluster) HAProxyAddr(port string) string {
	if c.haproxy == nil {
		panic("patroni: the cluster runs no HAProxy (Options.NoHAProxy)")
	}
	p := map[string]int{Writer: c.writerPort, Reader: c.readerPort, ReaderLag: c.readerLagPort}[port]
	if p == 0 {
		panic("patroni: no HAProxy port " + port)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
}

// HAProxyDSN is the two-host URL an application is given behind HAProxy:
// the writer port, then the reader port.
func (c *Cluster) HAProxyDSN() string {
	return integration.HostsDSN(c.HAProxyAddr(Writer), c.HAProxyAddr(Reader))
}

// HAProxyLog returns the end of HAProxy's output, n lines.
func (c *Cluster) HAProxyLog(n int) string {
	if c.haproxy == nil {
		return ""
	}
	return logTail(c.haproxy.logPath, n)
}

// HAProxyUp returns, per HAProxy port (Writer, Reader, ReaderLag), the
// members HAProxy considers up, from its stats socket ("show stat").
func (c *Cluster) HAProxyUp(ctx context.Context) (map[string][]int, error) {
	var d net.Dialer
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "unix", filepath.Join(c.dir, "haproxy", "haproxy.sock"))
	if err != nil {
		return nil, fmt.Errorf("patroni: haproxy stats socket: %w", err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := io.WriteString(conn, "show stat\n"); err != nil {
		return nil, fmt.Errorf("patroni: haproxy stats socket: %w", err)
	}
	rd := bufio.NewReader(conn)
	header, err := rd.ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("patroni: haproxy stats socket: %w", err)
	}
	r := csv.NewReader(rd)
	r.FieldsPerRecord = -1
	cols := strings.Split(strings.TrimPrefix(strings.TrimSpace(header), "# "), ",")
	pos := func(name string) int { return slices.Index(cols, name) }
	px, sv, status := pos("pxname"), pos("svname"), pos("status")
	if px < 0 || sv < 0 || status < 0 {
		return nil, fmt.Errorf("patroni: haproxy stats: unexpected header %q", header)
	}
	up := map[string][]int{Writer: nil, Reader: nil, ReaderLag: nil}
	for {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("patroni: haproxy stats: %w", err)
		}
		if len(rec) <= max(px, sv, status) {
			continue
		}
		if _, ok := up[rec[px]]; !ok || rec[sv] == "FRONTEND" || rec[sv] == "BACKEND" {
			continue
		}
		if strings.HasPrefix(rec[status], "UP") && !strings.Contains(rec[status], "going down") {
			if i := c.index(rec[sv]); i >= 0 {
				up[rec[px]] = append(up[rec[px]], i)
			}
		}
	}
	for _, v := range up {
		slices.Sort(v)
	}
	return up, nil
}

// WaitHAProxy waits until HAProxy's checks agree with Patroni's REST API:
// its writer port has exactly the members whose GET /primary passes, its
// reader ports the members whose GET /replica (and /replica?lag=…)
// passes.
func (c *Cluster) WaitHAProxy(ctx context.Context) error {
	if c.haproxy == nil {
		return nil
	}
	err := c.poll(ctx, "haproxy's checks to agree with Patroni", func(ctx context.Context) (bool, string) {
		if !c.haproxy.running() {
			return false, "haproxy exited:\n" + logTail(c.haproxy.logPath, 20)
		}
		up, err := c.HAProxyUp(ctx)
		if err != nil {
			return false, err.Error()
		}
		want := map[string][]int{}
		for _, i := range c.Live() {
			if c.isFrozen(i) {
				continue
			}
			for port, path := range map[string]string{Writer: "/primary", Reader: "/replica", ReaderLag: "/replica?lag=" + c.opts.ReplicaLag} {
				if code, err := c.Check(ctx, i, path); err == nil && code == 200 {
					want[port] = append(want[port], i)
				}
			}
		}
		for _, port := range []string{Writer, Reader, ReaderLag} {
			slices.Sort(want[port])
			if !slices.Equal(up[port], want[port]) {
				return false, fmt.Sprintf("haproxy has %v up, Patroni passes %v", up, want)
			}
		}
		return true, ""
	})
	if err != nil {
		return fmt.Errorf("%w\n--- end of haproxy's log ---\n%s", err, logTail(c.haproxy.logPath, 10))
	}
	return nil
}
