package integration

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Options configures Start. The zero value starts a primary and two
// replicas from the local server binaries in a new temporary directory, or
// in Docker containers where there are no binaries.
type Options struct {
	// Replicas is the number of streaming replicas: 0 means 2, a negative
	// value means none (a lone primary).
	Replicas int
	// BinDir is the directory holding initdb, pg_ctl and postgres, and
	// pg_basebackup if the packaging has it (without it replicas are
	// cloned by an online file copy). Empty means $PGREPLICA_PG_BIN, else
	// the directory of initdb on PATH, else the newest
	// /usr/lib/postgresql/*/bin (or another usual installation
	// directory). Clusters of one process may each use another BinDir,
	// that is another major version.
	BinDir string
	// Dir is the parent of the cluster's own temporary directory, which
	// Close removes. Empty means os.TempDir(). When the tests run as root
	// the server user must be able to traverse it, so avoid /root. Docker
	// keeps the data inside the containers and ignores Dir.
	Dir string
	// Logf, if not nil, receives progress messages (steps and timings).
	Logf func(format string, args ...any)
	// ExtraConf holds extra postgresql.conf lines, such as
	// "log_statement = 'all'". They follow the harness's own settings and
	// so override them; replicas inherit them.
	ExtraConf []string
	// Runtime chooses how the servers run: RuntimeLocal (the server
	// binaries of this machine), RuntimeDocker (containers), or
	// RuntimeAuto, the default: $PGREPLICA_HARNESS if set, else local
	// binaries if found (or if BinDir is set), else Docker.
	Runtime string
	// Image is the Docker image of the servers ("repository:tag"); empty
	// means $PGREPLICA_DOCKER_IMAGE, else "postgres:15". It must be
	// Debian-based like the official image: the harness runs initdb,
	// pg_basebackup and postgres from PATH as the OS user postgres.
	Image string
	// Port, if not 0, is the port of node 0 on 127.0.0.1; node i listens
	// on Port+i. Start fails when one of them is taken (without Port each
	// node gets a free port, moving on when one is taken meanwhile).
	Port int
	// Keep makes Dir (which must then be set) the cluster's own directory
	// instead of the parent of a temporary one, and Close stops the
	// servers but leaves their data there. Start on a Dir that holds a
	// kept cluster starts its nodes again, with their data, rather than
	// creating them: replicas follow the primary on its new port, and
	// nodes beyond the requested number stay stopped (a missing one is
	// cloned). Start refuses a Dir whose servers are running. Keep needs
	// the local runtime: Docker keeps the data inside the containers.
	Keep bool
}

// Cluster is a running PostgreSQL primary with its streaming replicas. Node
// 0 is the initial primary and nodes 1..Len()-1 its replicas. Its methods
// are safe for concurrent use, but operations that start, stop or
// reconfigure the same node must not overlap. Methods taking a node index
// panic when it is out of range, like a slice would.
type Cluster struct {
	srv   servers
	logf  func(format string, args ...any)
	nodes []*node
	dsn   string

	mu      sync.Mutex // guards the fields below and the nodes' state
	primary int
	closed  bool
}

// startTimeout bounds the internal waits of Start when ctx has no deadline.
const startTimeout = 2 * time.Minute

// Start creates and starts a cluster: it initialises the primary with
// initdb (superuser postgres, trust authentication, settings tuned for
// speed rather than durability), starts it on a free 127.0.0.1 port, clones
// each replica from it with pg_basebackup -X stream (or, where the binaries
// have no pg_basebackup, a file copy between pg_backup_start and
// pg_backup_stop), starts the replicas and returns once every replica
// streams from the primary. Replica i connects with application_name
// "replica<i>".
//
// The servers run from the local server binaries or, where there are none
// and a Docker engine answers, in containers (see Options.Runtime). When
// neither is available the error wraps ErrNoPostgres. On any failure Start
// removes whatever it started and returns an error that quotes the end of
// the server logs.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	began := time.Now()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, startTimeout)
		defer cancel()
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	replicas := opts.Replicas
	switch {
	case replicas == 0:
		replicas = 2
	case replicas < 0:
		replicas = 0
	}
	if opts.Port != 0 && (opts.Port < 1 || opts.Port+replicas > 65535) {
		return nil, fmt.Errorf("integration: ports %d to %d are out of range", opts.Port, opts.Port+replicas)
	}
	if opts.Keep && opts.Dir == "" {
		return nil, errors.New("integration: Options.Keep needs Options.Dir")
	}
	srv, err := newServers(ctx, opts)
	if err != nil {
		return nil, err
	}
	c := &Cluster{srv: srv, logf: opts.Logf}
	defer func() {
		if err != nil {
			err = c.withLogs(err, -1)
			_ = c.Close()
		}
	}()
	c.logf("integration: %s", srv.describe())
	for i := 0; i <= replicas; i++ {
		n := &node{index: i, name: "replica" + strconv.Itoa(i), upstream: -1, fixedPort: opts.Port != 0}
		if n.fixedPort {
			n.port = opts.Port + i
			err = claimPort(n.port)
		} else {
			n.port, err = reservePort()
		}
		if err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, n)
	}

	primary := c.nodes[0]
	conf := append(serverConf(srv.major(), replicas), opts.ExtraConf...)
	if err := srv.createPrimary(ctx, primary, conf, hbaConf); err != nil {
		return nil, err
	}
	c.setState(primary, true, false, -1)
	c.logf("integration: primary up on port %d after %v", primary.port, time.Since(began).Round(time.Millisecond))

	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for _, n := range c.nodes[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.Now()
			if errs[n.index] = srv.createReplica(ctx, n, primary, conninfo(srv, n, primary)); errs[n.index] != nil {
				return
			}
			c.setState(n, true, true, primary.index)
			c.logf("integration: replica%d up on port %d after %v", n.index, n.port, time.Since(t).Round(time.Millisecond))
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

// setState records what n runs as.
func (c *Cluster) setState(n *node, running, standby bool, upstream int) {
	c.mu.Lock()
	n.running, n.standby, n.upstream = running, standby, upstream
	c.mu.Unlock()
}

// Close stops every server (immediate shutdown, then SIGKILL for anything
// left), removes the cluster's directory or containers and releases its
// ports. It may be called more than once, and on a nil Cluster.
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
	var frozen []*node
	for _, n := range nodes {
		n.running = false
		if n.frozen {
			frozen = append(frozen, n)
			n.frozen = false
		}
	}
	c.mu.Unlock()
	for _, n := range frozen {
		_ = c.srv.freeze(n, false) // a stopped server cannot shut down
	}
	err := c.srv.close(nodes)
	for _, n := range nodes {
		releasePort(n.port)
	}
	return err
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

// NodeAt returns the index of the node listening on port, or -1: with
// inet_server_port() it tells which node served a query.
func (c *Cluster) NodeAt(port int) int {
	for i, n := range c.nodes {
		if n.port == port {
			return i
		}
	}
	return -1
}

// Dir returns the cluster's directory on this machine, which holds the
// data directories and server logs of the local runtime, or "" when the
// servers run in Docker containers.
func (c *Cluster) Dir() string { return c.srv.clusterDir() }

// Runtime reports how the servers run: RuntimeLocal or RuntimeDocker.
func (c *Cluster) Runtime() string { return c.srv.runtime() }

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
		if name, tail := c.srv.logTail(n, 20); tail != "" {
			fmt.Fprintf(&b, "\n--- end of %s ---\n%s", name, tail)
		}
	}
	if b.Len() == 0 {
		return err
	}
	return fmt.Errorf("%w%s", err, b.String())
}

// node returns node i after checking that the cluster is open (and that
// there is a node i: Primary is -1 between Demote and Promote).
func (c *Cluster) node(i int) (*node, error) {
	if i < 0 || i >= len(c.nodes) {
		return nil, fmt.Errorf("integration: no node %d (the cluster has %d; -1: no primary)", i, len(c.nodes))
	}
	n := c.nodes[i]
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errClosed
	}
	return n, nil
}

var errClosed = errors.New("integration: cluster is closed")
