package integration

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"strconv"
	"strings"
	"sync"
)

// node is one server of a cluster, as Cluster sees it; the runtime keeps
// the rest (its process or container).
type node struct {
	index int
	name  string // application_name when streaming
	port  int    // TCP port on 127.0.0.1 for clients
	// fixedPort: the port was asked for (Options.Port), never move it.
	fixedPort bool

	// Guarded by Cluster.mu.
	running  bool
	frozen   bool // its processes are stopped (Freeze)
	standby  bool // in recovery, following upstream
	upstream int  // index of the node it streams from; -1 if none
}

// serverConf returns the postgresql.conf settings of every node: fast, not
// durable, TCP on loopback only (no Unix socket, whose path length is
// limited), ready for streaming replication.
func serverConf(major, replicas int) []string {
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
	if major >= 13 {
		conf = append(conf, "wal_keep_size = '512MB'")
	} else {
		conf = append(conf, "wal_keep_segments = 32")
	}
	return conf
}

// hbaConf trusts every connection, replication included: the servers
// listen on loopback (or a private container network) only.
const hbaConf = `# pgreplica integration harness: trust, replication included
local all         all          trust
local replication all          trust
host  all         all all      trust
host  replication all all      trust
`

// follow makes the stopped node n a standby that streams with conninfo:
// it replaces primary_conninfo in postgresql.auto.conf (where
// pg_basebackup -R and ALTER SYSTEM keep it) and creates standby.signal.
func follow(s servers, n *node, conninfo string) error {
	old, err := s.readConf(n, "postgresql.auto.conf")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
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
	fmt.Fprintf(&b, "primary_conninfo = '%s'\n", strings.ReplaceAll(conninfo, "'", "''"))
	if err := s.writeConf(n, "postgresql.auto.conf", b.String()); err != nil {
		return err
	}
	return s.writeConf(n, "standby.signal", "")
}

// conninfo is the primary_conninfo with which n streams from upstream.
func conninfo(s servers, n, upstream *node) string {
	host, port := s.peerAddr(upstream)
	return fmt.Sprintf("host=%s port=%d user=postgres application_name=%s sslmode=disable connect_timeout=5",
		host, port, n.name)
}

// onFreePort calls try, which starts node n on n.port and reports whether
// that failed because the port was taken in the meantime; then it moves n
// to another free port and tries again, up to five times.
func onFreePort(n *node, logf func(string, ...any), try func() (taken bool, err error)) error {
	for attempt := 1; ; attempt++ {
		taken, err := try()
		if taken && n.fixedPort {
			return fmt.Errorf("%w: %d (node %d): %w", ErrPortTaken, n.port, n.index, err)
		}
		if err == nil || attempt == 5 || !taken {
			return err
		}
		port, perr := reservePort()
		if perr != nil {
			return err
		}
		logf("integration: port %d of node %d is taken, trying %d", n.port, n.index, port)
		releasePort(n.port)
		n.port = port
	}
}

// ErrPortTaken: a port asked for (Options.Port) was taken by another
// process before the server could bind it. Any outgoing connection on
// loopback may take a free port: a caller that picked the ports itself
// can pick others and start again.
var ErrPortTaken = errors.New("integration: the port asked for is taken")

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

// claimPort reserves the given port on 127.0.0.1, or fails if it is taken.
func claimPort(port int) error {
	portsMu.Lock()
	defer portsMu.Unlock()
	if ports[port] {
		return fmt.Errorf("integration: port %d is taken by another cluster of this process", port)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("integration: port %d: %w", port, err)
	}
	l.Close()
	ports[port] = true
	return nil
}

func releasePort(port int) {
	portsMu.Lock()
	delete(ports, port)
	portsMu.Unlock()
}
