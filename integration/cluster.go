package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Options configures Start. The zero value starts a primary and two
// replicas in a new temporary directory.
type Options struct {
	// Replicas is the number of streaming replicas: 0 means 2, a negative
	// value means none (a lone primary).
	Replicas int
	// BinDir is the directory holding initdb, pg_ctl, postgres and
	// pg_basebackup. Empty means $PGREPLICA_PG_BIN, else the directory of
	// initdb on PATH, else the newest /usr/lib/postgresql/*/bin (or another
	// usual installation directory).
	BinDir string
	// Dir is the parent of the cluster's own temporary directory, which
	// Close removes. Empty means os.TempDir(). When the tests run as root
	// the server user must be able to traverse it, so avoid /root.
	Dir string
	// Logf, if not nil, receives progress messages (steps and timings).
	Logf func(format string, args ...any)
	// ExtraConf holds extra postgresql.conf lines, such as
	// "log_statement = 'all'". They follow the harness's own settings and
	// so override them; replicas inherit them.
	ExtraConf []string
}

// Cluster is a running PostgreSQL primary with its streaming replicas. Node
// 0 is the initial primary and nodes 1..Len()-1 its replicas. Its methods
// are safe for concurrent use, but operations that start, stop or
// reconfigure the same node must not overlap. Methods taking a node index
// panic when it is out of range, like a slice would.
type Cluster struct {
	bin   binaries
	acct  account
	dir   string
	logf  func(format string, args ...any)
	nodes []*node
	dsn   string
	dog   *watchdog

	mu      sync.Mutex // guards the fields below and the nodes' state
	primary int
	closed  bool
}

// startTimeout bounds the internal waits of Start when ctx has no deadline.
const startTimeout = 2 * time.Minute

// Start creates and starts a cluster: it initialises the primary with
// initdb (superuser postgres, trust authentication, settings tuned for
// speed rather than durability), starts it on a free 127.0.0.1 port, clones
// each replica from it with pg_basebackup -R -X stream, starts the replicas
// and returns once every replica streams from the primary. Replica i
// connects with application_name "replica<i>".
//
// When no server binaries are found the error wraps ErrNoPostgres. On any
// failure Start stops whatever it started, removes its directory and
// returns an error that quotes the end of the server logs.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	began := time.Now()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, startTimeout)
		defer cancel()
	}
	bin, err := findBinaries(ctx, opts.BinDir)
	if err != nil {
		return nil, err
	}
	acct, err := serverAccount()
	if err != nil {
		return nil, err
	}
	replicas := opts.Replicas
	switch {
	case replicas == 0:
		replicas = 2
	case replicas < 0:
		replicas = 0
	}
	if opts.Dir != "" {
		if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
			return nil, fmt.Errorf("integration: %w", err)
		}
	}
	dir, err := os.MkdirTemp(opts.Dir, "pgr")
	if err != nil {
		return nil, fmt.Errorf("integration: %w", err)
	}
	if dir, err = filepath.Abs(dir); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("integration: %w", err)
	}
	c := &Cluster{bin: bin, acct: acct, dir: dir, logf: opts.Logf}
	if c.logf == nil {
		c.logf = func(string, ...any) {}
	}
	defer func() {
		if err != nil {
			err = c.withLogs(err, -1)
			_ = c.Close()
		}
	}()
	// The server user must reach the node directories inside dir.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, fmt.Errorf("integration: %w", err)
	}
	if err := acct.canReach(dir); err != nil {
		return nil, err
	}
	c.dog = startWatchdog(dir)
	c.logf("integration: PostgreSQL %d from %s, running as %s, in %s", bin.major, bin.dir, acct.name, dir)

	for i := 0; i <= replicas; i++ {
		n, err := c.newNode(i)
		if err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, n)
	}

	primary := c.nodes[0]
	if err := c.initPrimary(ctx, primary, replicas, opts.ExtraConf); err != nil {
		return nil, err
	}
	if err := c.startNew(ctx, primary); err != nil {
		return nil, err
	}
	c.logf("integration: primary up on port %d after %v", primary.port, time.Since(began).Round(time.Millisecond))

	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for _, n := range c.nodes[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[n.index] = c.initReplica(ctx, n, primary)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	hosts := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		hosts[i] = fmt.Sprintf("127.0.0.1:%d", n.port)
	}
	c.dsn = "postgres://postgres@" + strings.Join(hosts, ",") + "/postgres?sslmode=disable"

	if err := c.WaitStreaming(ctx); err != nil {
		return nil, err
	}
	c.logf("integration: cluster of 1 primary + %d replicas streaming after %v", replicas, time.Since(began).Round(time.Millisecond))
	return c, nil
}

// initReplica clones, configures and starts replica n of primary.
func (c *Cluster) initReplica(ctx context.Context, n, primary *node) error {
	t := time.Now()
	if err := c.baseBackup(ctx, n, primary); err != nil {
		return err
	}
	if err := c.writeStandbyConf(n, primary); err != nil {
		return err
	}
	if err := c.startNew(ctx, n); err != nil {
		return err
	}
	c.mu.Lock()
	n.standby, n.upstream = true, primary.index
	c.mu.Unlock()
	c.logf("integration: replica%d up on port %d after %v", n.index, n.port, time.Since(t).Round(time.Millisecond))
	return nil
}

// Close stops every server (immediate shutdown, then SIGKILL for anything
// left), removes the cluster's directory and releases its ports. It may be
// called more than once, and on a nil Cluster.
func (c *Cluster) Close() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	nodes := c.nodes
	c.mu.Unlock()

	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.shutdown(n)
		}()
	}
	wg.Wait()
	c.dropTemplate()
	err := os.RemoveAll(c.dir)
	c.dog.stop()
	for _, n := range nodes {
		releasePort(n.port)
	}
	if err != nil {
		return fmt.Errorf("integration: removing %s: %w", c.dir, err)
	}
	return nil
}

// DSN returns a multi-host URL naming every node, node 0 first:
// postgres://postgres@127.0.0.1:P0,127.0.0.1:P1,.../postgres?sslmode=disable.
func (c *Cluster) DSN() string { return c.dsn }

// NodeDSN returns the URL of node i alone.
func (c *Cluster) NodeDSN(i int) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.nodes[i].port)
}

// Port returns the TCP port of node i on 127.0.0.1. It stays the same when
// the node is stopped and started again.
func (c *Cluster) Port(i int) int { return c.nodes[i].port }

// Len returns the number of nodes, primary included.
func (c *Cluster) Len() int { return len(c.nodes) }

// Primary returns the index of the current primary: 0 until Promote makes
// another node primary.
func (c *Cluster) Primary() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.primary
}

// withLogs appends the end of the server logs to err: of node i, or of
// every node when i < 0.
func (c *Cluster) withLogs(err error, i int) error {
	var b strings.Builder
	for _, n := range c.nodes {
		if i >= 0 && n.index != i {
			continue
		}
		if tail := logTail(n.logPath, 20); tail != "" {
			fmt.Fprintf(&b, "\n--- end of %s ---\n%s", n.logPath, tail)
		}
	}
	if b.Len() == 0 {
		return err
	}
	return fmt.Errorf("%w%s", err, b.String())
}

// node returns node i after checking that the cluster is open.
func (c *Cluster) node(i int) (*node, error) {
	n := c.nodes[i]
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errClosed
	}
	return n, nil
}

var errClosed = errors.New("integration: cluster is closed")
