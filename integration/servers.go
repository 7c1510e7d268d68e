package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
)

// servers runs the PostgreSQL servers of a cluster: as processes from the
// local server binaries (localServers) or in Docker containers
// (dockerServers). Cluster keeps the topology (which node is running, which
// follows which) and calls these methods one node at a time; they do not
// touch that state.
type servers interface {
	// runtime is RuntimeLocal or RuntimeDocker.
	runtime() string
	// describe says where the servers come from, for progress messages.
	describe() string
	// clusterDir is the cluster's directory on this machine, or "" if
	// none.
	clusterDir() string
	// major is the server's major version, e.g. 15.
	major() int
	// createPrimary creates node n as a new primary with the given
	// postgresql.conf lines and pg_hba.conf, starts it and returns once it
	// accepts connections.
	createPrimary(ctx context.Context, n *node, conf []string, hba string) error
	// createReplica clones node n from upstream, makes it stream from
	// upstream with primary_conninfo conninfo, starts it and returns once
	// it accepts connections.
	createReplica(ctx context.Context, n, upstream *node, conninfo string) error
	// peerAddr is the address other servers reach node n at.
	peerAddr(n *node) (host string, port int)
	// readConf and writeConf read and replace a file in the data
	// directory of the stopped node n.
	readConf(n *node, name string) ([]byte, error)
	writeConf(n *node, name, content string) error
	// start starts the stopped node n and returns once it accepts
	// connections.
	start(ctx context.Context, n *node) error
	// stop shuts n down (fast mode, or immediate) and returns once it is
	// gone. Stopping a stopped node does nothing.
	stop(ctx context.Context, n *node, immediate bool) error
	// kill crashes n (SIGKILL to every server process).
	kill(n *node) error
	// freeze stops every process of n where it is (SIGSTOP, or pausing its
	// container) when frozen is set, and lets them run on when not.
	freeze(n *node, frozen bool) error
	// alive reports whether a server of n runs, whatever Cluster believes.
	alive(n *node) bool
	// pid returns the process id of n's running postmaster as this
	// machine's /proc numbers it, or an error saying why it is unknown.
	pid(n *node) (int, error)
	// logTail returns the name and the last lines of n's server log.
	logTail(n *node, lines int) (name, tail string)
	// close removes every server and everything they kept on disk. The
	// nodes are those created so far.
	close(nodes []*node) error
}

// RuntimeEnv names the environment variable that chooses how the harness
// runs the servers when Options.Runtime is empty: "local" (server binaries
// on this machine), "docker" (containers), or empty for local binaries
// with Docker as the fallback.
const RuntimeEnv = "PGREPLICA_HARNESS"

// Runtimes for Options.Runtime and PGREPLICA_HARNESS.
const (
	RuntimeAuto   = ""       // local binaries if found, else Docker
	RuntimeLocal  = "local"  // local binaries only
	RuntimeDocker = "docker" // Docker only
)

// newServers picks and prepares the runtime for a new cluster: an explicit
// choice (Options.Runtime; else local binaries if Options.BinDir is set;
// else PGREPLICA_HARNESS), else local binaries, else a Docker engine that
// answers. When nothing is usable the error wraps ErrNoPostgres and
// says what was tried.
func newServers(ctx context.Context, opts Options) (servers, error) {
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	runtime := opts.Runtime
	if runtime == RuntimeAuto && opts.BinDir != "" {
		runtime = RuntimeLocal
	}
	if runtime == RuntimeAuto {
		runtime = os.Getenv(RuntimeEnv)
	}
	switch runtime {
	case RuntimeLocal:
		return newLocalServers(ctx, opts)
	case RuntimeDocker:
		return newDockerServers(ctx, opts)
	case RuntimeAuto:
		local, err := newLocalServers(ctx, opts)
		if !errors.Is(err, ErrNoPostgres) {
			return local, err
		}
		docker, derr := newDockerServers(ctx, opts)
		if errors.Is(derr, errNoDocker) {
			return nil, fmt.Errorf("%w; %w", err, derr)
		}
		return docker, derr
	default:
		return nil, fmt.Errorf("integration: unknown runtime %q (Options.Runtime or %s): want %q, %q or empty",
			runtime, RuntimeEnv, RuntimeLocal, RuntimeDocker)
	}
}
