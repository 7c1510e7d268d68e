package integration

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/ory/dockertest/v3"
	dc "github.com/ory/dockertest/v3/docker"
)

// errNoDocker reports that no Docker engine answered.
var errNoDocker = errors.New("integration: no Docker engine answered " +
	"(start one, or point DOCKER_HOST at one)")

// ImageEnv names the environment variable that chooses the Docker image
// when Options.Image is empty.
const ImageEnv = "PGREPLICA_DOCKER_IMAGE"

// DefaultImage is the Docker image used when neither Options.Image nor
// PGREPLICA_DOCKER_IMAGE names one.
const DefaultImage = "postgres:15"

// dockerData is the data directory inside a container. It is not the
// image's volume (/var/lib/postgresql/data), so a container's data lives
// and dies with the container.
const dockerData = "/var/lib/postgresql/pgreplica"

// dockerEntrypoint runs as the OS user postgres in every container: on the
// first start it creates the data directory (initdb on the primary,
// pg_basebackup from $PGR_UPSTREAM on a replica); on every start it runs
// the server in the foreground as PID 1, so that Docker's signals reach it,
// on port $PGR_PORT.
const dockerEntrypoint = `set -e
d=` + dockerData + `
if [ ! -s "$d/PG_VERSION" ]; then
	rm -rf "$d"
	if [ "$PGR_ROLE" = primary ]; then
		initdb -D "$d" -U postgres --auth=trust -E UTF8 --locale=C --no-sync
		printf '%s\n' "$PGR_CONF" >>"$d/postgresql.conf"
		printf '%s' "$PGR_HBA" >"$d/pg_hba.conf"
	else
		pg_basebackup -h "$PGR_UPSTREAM" -p "$PGR_UPSTREAM_PORT" -U postgres -w -D "$d" -X stream -c fast --no-sync
		printf "primary_conninfo = '%s'\n" "$PGR_CONNINFO" >>"$d/postgresql.auto.conf"
		: >"$d/standby.signal"
	fi
fi
exec postgres -D "$d" -p "$PGR_PORT"
`

// dockerServers runs every server in a container of its own, on a Docker
// network of the cluster's own. The server of node n listens on n.port in
// its container, published on the same port of 127.0.0.1, so that
// inet_server_port() tells the nodes apart as with local servers. Replicas
// reach their upstream by container name on that network.
type dockerServers struct {
	pool *dockertest.Pool
	repo string // image repository
	tag  string // image tag
	maj  int
	name string // of the network, and prefix of the containers' names
	net  *dockertest.Network
	logf func(format string, args ...any)
	dog  *watchdog

	mu   sync.Mutex
	ctrs map[int]*dockertest.Resource // by node index
}

// newDockerServers connects to the Docker engine (DOCKER_HOST or the
// default socket), pulls the image if it is missing and creates the
// cluster's network. The error wraps errNoDocker when no engine answers.
func newDockerServers(ctx context.Context, opts Options) (*dockerServers, error) {
	pool, err := dockertest.NewPool("")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errNoDocker, err)
	}
	if err := pool.Client.PingWithContext(ctx); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errNoDocker, pool.Client.Endpoint(), err)
	}
	if opts.Keep {
		return nil, errors.New("integration: Options.Keep needs the local server binaries (Docker keeps the data inside its containers)")
	}
	image := opts.Image
	if image == "" {
		image = os.Getenv(ImageEnv)
	}
	if image == "" {
		image = DefaultImage
	}
	repo, tag := splitImage(image)
	s := &dockerServers{pool: pool, repo: repo, tag: tag, logf: opts.Logf, ctrs: map[int]*dockertest.Resource{}}
	if s.maj, err = s.prepareImage(ctx); err != nil {
		return nil, err
	}
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	s.name = "pgreplica-" + hex.EncodeToString(suffix)
	s.dog = startWatchdog(dockerWatchdogScript, s.name)
	if s.net, err = pool.CreateNetwork(s.name); err != nil {
		s.dog.stop()
		return nil, fmt.Errorf("integration: creating Docker network %s: %w", s.name, err)
	}
	return s, nil
}

// splitImage splits "repo:tag" ("registry:5000/repo" has no tag).
func splitImage(image string) (repo, tag string) {
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		return image[:i], image[i+1:]
	}
	return image, "latest"
}

// prepareImage pulls the image if the engine lacks it and returns the
// PostgreSQL major version it holds: $PG_MAJOR of the image (the official
// images set it), else the number its tag starts with.
func (s *dockerServers) prepareImage(ctx context.Context) (int, error) {
	ref := s.repo + ":" + s.tag
	img, err := s.pool.Client.InspectImage(ref)
	if err != nil {
		s.logf("integration: pulling Docker image %s", ref)
		pull := dc.PullImageOptions{Repository: s.repo, Tag: s.tag, Context: ctx, InactivityTimeout: time.Minute}
		if err := s.pool.Client.PullImage(pull, dc.AuthConfiguration{}); err != nil {
			return 0, fmt.Errorf("integration: pulling Docker image %s: %w", ref, err)
		}
		if img, err = s.pool.Client.InspectImage(ref); err != nil {
			return 0, fmt.Errorf("integration: Docker image %s: %w", ref, err)
		}
	}
	version := regexp.MustCompile(`^\d+`).FindString(s.tag)
	if img.Config != nil {
		for _, kv := range img.Config.Env {
			if v, ok := strings.CutPrefix(kv, "PG_MAJOR="); ok {
				version = v
			}
		}
	}
	major, err := strconv.Atoi(version)
	if err != nil {
		return 0, fmt.Errorf("integration: cannot tell the PostgreSQL version of Docker image %s "+
			"(no PG_MAJOR in its environment, no version in its tag)", ref)
	}
	if major < minMajor {
		return 0, fmt.Errorf("integration: Docker image %s holds PostgreSQL %d, older than %d", ref, major, minMajor)
	}
	return major, nil
}

func (s *dockerServers) describe() string {
	return fmt.Sprintf("PostgreSQL %d in Docker containers of %s:%s at %s, network %s",
		s.maj, s.repo, s.tag, s.pool.Client.Endpoint(), s.name)
}

func (s *dockerServers) clusterDir() string { return "" }

func (s *dockerServers) major() int { return s.maj }

func (s *dockerServers) runtime() string { return RuntimeDocker }

func (s *dockerServers) containerName(n *node) string { return s.name + "-n" + strconv.Itoa(n.index) }

func (s *dockerServers) peerAddr(n *node) (string, int) { return s.containerName(n), n.port }

func (s *dockerServers) ctr(n *node) *dockertest.Resource {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ctrs[n.index]
}

func (s *dockerServers) createPrimary(ctx context.Context, n *node, conf []string, hba string) error {
	// Listen on the container's network too (published on 127.0.0.1 only).
	conf = append(conf, "listen_addresses = '*'")
	return s.run(ctx, n, []string{
		"PGR_ROLE=primary",
		"PGR_CONF=" + strings.Join(conf, "\n"),
		"PGR_HBA=" + hba,
	})
}

func (s *dockerServers) createReplica(ctx context.Context, n, upstream *node, conninfo string) error {
	host, port := s.peerAddr(upstream)
	return s.run(ctx, n, []string{
		"PGR_ROLE=replica",
		"PGR_UPSTREAM=" + host,
		"PGR_UPSTREAM_PORT=" + strconv.Itoa(port),
		"PGR_CONNINFO=" + conninfo,
	})
}

// run creates and starts the container of n and waits until its server
// accepts connections. When the node's port was taken in the meantime it
// tries another.
func (s *dockerServers) run(ctx context.Context, n *node, env []string) error {
	return onFreePort(n, s.logf, func() (bool, error) {
		port := strconv.Itoa(n.port)
		r, err := s.pool.RunWithOptions(&dockertest.RunOptions{
			Name:       s.containerName(n),
			Repository: s.repo,
			Tag:        s.tag,
			Env:        append(env, "PGR_PORT="+port, "LC_ALL=C", "LANG=C"),
			Entrypoint: []string{"/bin/sh", "-c", dockerEntrypoint},
			Cmd:        []string{"pgreplica-node"}, // $0 of the script
			User:       "postgres",
			// By ID: RunWithOptions writes to the Networks it is given,
			// and the replicas start concurrently.
			NetworkID:    s.net.Network.ID,
			Labels:       map[string]string{"pgreplica.cluster": s.name},
			ExposedPorts: []string{port + "/tcp"},
			PortBindings: map[dc.Port][]dc.PortBinding{
				dc.Port(port + "/tcp"): {{HostIP: "127.0.0.1", HostPort: port}},
			},
		}, func(hc *dc.HostConfig) { hc.PublishAllPorts = false })
		if err != nil {
			// The container may exist even though it failed to start.
			_ = s.pool.Client.RemoveContainer(dc.RemoveContainerOptions{ID: s.containerName(n), Force: true, RemoveVolumes: true})
			msg := err.Error()
			taken := strings.Contains(msg, "address already in use") || strings.Contains(msg, "port is already allocated")
			return taken, fmt.Errorf("integration: starting container %s: %w", s.containerName(n), err)
		}
		s.mu.Lock()
		s.ctrs[n.index] = r
		s.mu.Unlock()
		return false, s.waitReady(ctx, n)
	})
}

// waitReady waits until n's server accepts connections, and fails early
// when its container stops.
func (s *dockerServers) waitReady(ctx context.Context, n *node) error {
	name := s.containerName(n)
	return poll(ctx, "container "+name+" to accept connections", func(ctx context.Context) (bool, string, error) {
		conn, err := pgconn.Connect(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", n.port))
		if err == nil {
			conn.Close(ctx)
			return true, "", nil
		}
		if !s.alive(n) {
			return false, "", fmt.Errorf("integration: container %s stopped", name)
		}
		return false, err.Error(), nil
	})
}

func (s *dockerServers) start(ctx context.Context, n *node) error {
	if err := s.pool.Client.StartContainerWithContext(s.ctr(n).Container.ID, nil, ctx); err != nil {
		var running *dc.ContainerAlreadyRunning
		if !errors.As(err, &running) {
			return fmt.Errorf("integration: starting container %s: %w", s.containerName(n), err)
		}
	}
	return s.waitReady(ctx, n)
}

// stop sends SIGINT (fast shutdown) or SIGQUIT (immediate) to the
// postmaster, PID 1 of the container, and waits until the container exits.
func (s *dockerServers) stop(ctx context.Context, n *node, immediate bool) error {
	sig := dc.SIGINT
	if immediate {
		sig = dc.SIGQUIT
	}
	return s.signal(ctx, n, sig)
}

func (s *dockerServers) kill(n *node) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.signal(ctx, n, dc.SIGKILL)
}

// signal sends sig to the container of n and waits until it exits; a
// container that does not run is left alone.
func (s *dockerServers) signal(ctx context.Context, n *node, sig dc.Signal) error {
	id := s.ctr(n).Container.ID
	err := s.pool.Client.KillContainer(dc.KillContainerOptions{ID: id, Signal: sig, Context: ctx})
	var notRunning *dc.ContainerNotRunning
	if errors.As(err, &notRunning) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("integration: signalling container %s: %w", s.containerName(n), err)
	}
	if _, err := s.pool.Client.WaitContainerWithContext(id, ctx); err != nil {
		return fmt.Errorf("integration: waiting for container %s to exit: %w", s.containerName(n), err)
	}
	return nil
}

func (s *dockerServers) alive(n *node) bool {
	r := s.ctr(n)
	if r == nil {
		return false
	}
	c, err := s.pool.Client.InspectContainer(r.Container.ID)
	return err == nil && c.State.Running
}

// pid returns the host's number of the container's PID 1, the
// postmaster, provided this machine sees the engine's processes (the
// engine runs here, not in a virtual machine): /proc/<pid>/cmdline must
// name postgres.
func (s *dockerServers) pid(n *node) (int, error) {
	r := s.ctr(n)
	if r == nil {
		return 0, fmt.Errorf("integration: node %d has no container", n.index)
	}
	c, err := s.pool.Client.InspectContainer(r.Container.ID)
	if err != nil {
		return 0, fmt.Errorf("integration: inspecting container %s: %w", s.containerName(n), err)
	}
	if !c.State.Running || c.State.Pid <= 0 {
		return 0, fmt.Errorf("integration: container %s is not running", s.containerName(n))
	}
	cmd, err := os.ReadFile("/proc/" + strconv.Itoa(c.State.Pid) + "/cmdline")
	if err != nil || !bytes.HasPrefix(cmd, []byte("postgres")) {
		return 0, fmt.Errorf("integration: the postmaster of container %s (pid %d in the engine's namespace) is not visible here",
			s.containerName(n), c.State.Pid)
	}
	return c.State.Pid, nil
}

func (s *dockerServers) logTail(n *node, lines int) (string, string) {
	r := s.ctr(n)
	if r == nil {
		return "", ""
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.pool.Client.Logs(dc.LogsOptions{
		Context: ctx, Container: r.Container.ID, OutputStream: &out, ErrorStream: &out,
		Stdout: true, Stderr: true, Tail: strconv.Itoa(lines),
	})
	if out.Len() == 0 {
		return "", ""
	}
	return "log of container " + s.containerName(n), lastLines(out.String(), lines)
}

// readConf copies a file out of the data directory (the container may be
// stopped).
func (s *dockerServers) readConf(n *node, name string) ([]byte, error) {
	_, content, err := s.download(n, name)
	return content, err
}

// download returns the header and content of a regular file in the data
// directory of n.
func (s *dockerServers) download(n *node, name string) (*tar.Header, []byte, error) {
	var archive bytes.Buffer
	err := s.pool.Client.DownloadFromContainer(s.ctr(n).Container.ID, dc.DownloadFromContainerOptions{
		Path: dockerData + "/" + name, OutputStream: &archive, InactivityTimeout: 10 * time.Second,
	})
	var apiErr *dc.Error
	if errors.As(err, &apiErr) && apiErr.Status == http.StatusNotFound {
		return nil, nil, fmt.Errorf("integration: %s in container %s: %w", name, s.containerName(n), fs.ErrNotExist)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("integration: reading %s from container %s: %w", name, s.containerName(n), err)
	}
	tr := tar.NewReader(&archive)
	hdr, err := tr.Next()
	if err != nil {
		return nil, nil, fmt.Errorf("integration: reading %s from container %s: %w", name, s.containerName(n), err)
	}
	content, err := io.ReadAll(tr)
	if err != nil {
		return nil, nil, fmt.Errorf("integration: reading %s from container %s: %w", name, s.containerName(n), err)
	}
	return hdr, content, nil
}

// writeConf copies a file into the data directory (the container may be
// stopped), owned by the owner of the data directory's PG_VERSION.
func (s *dockerServers) writeConf(n *node, name, content string) error {
	hdr, _, err := s.download(n, "PG_VERSION")
	if err != nil {
		return err
	}
	var archive bytes.Buffer
	tw := tar.NewWriter(&archive)
	if err := tw.WriteHeader(&tar.Header{
		Name: name, Mode: 0o600, Size: int64(len(content)), Uid: hdr.Uid, Gid: hdr.Gid,
		ModTime: time.Now(), Typeflag: tar.TypeReg,
	}); err != nil {
		return fmt.Errorf("integration: %w", err)
	}
	if _, err := io.WriteString(tw, content); err != nil {
		return fmt.Errorf("integration: %w", err)
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("integration: %w", err)
	}
	if err := s.pool.Client.UploadToContainer(s.ctr(n).Container.ID, dc.UploadToContainerOptions{
		Path: dockerData, InputStream: &archive,
	}); err != nil {
		return fmt.Errorf("integration: writing %s into container %s: %w", name, s.containerName(n), err)
	}
	return nil
}

// close removes every container with its volumes, then the network.
func (s *dockerServers) close(nodes []*node) error {
	var wg sync.WaitGroup
	errs := make([]error, len(nodes))
	for i, n := range nodes {
		r := s.ctr(n)
		if r == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.pool.Purge(r); err != nil {
				errs[i] = fmt.Errorf("integration: removing container %s: %w", s.containerName(n), err)
			}
		}()
	}
	wg.Wait()
	if err := s.pool.RemoveNetwork(s.net); err != nil {
		errs = append(errs, fmt.Errorf("integration: removing Docker network %s: %w", s.name, err))
	}
	s.dog.stop()
	return errors.Join(errs...)
}

// freeze pauses (or unpauses) the container of n: the cgroup freezer stops
// every process in it.
func (s *dockerServers) freeze(n *node, frozen bool) error {
	id := s.ctr(n).Container.ID
	if frozen {
		return s.pool.Client.PauseContainer(id)
	}
	return s.pool.Client.UnpauseContainer(id)
}
