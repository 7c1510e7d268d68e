package integration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ory/dockertest/v3"
	dc "github.com/ory/dockertest/v3/docker"
)

func TestSplitImage(t *testing.T) {
	for _, tc := range []struct{ image, repo, tag string }{
		{"postgres:15", "postgres", "15"},
		{"postgres", "postgres", "latest"},
		{"registry.local:5000/pg/postgres:16-bookworm", "registry.local:5000/pg/postgres", "16-bookworm"},
		{"registry.local:5000/postgres", "registry.local:5000/postgres", "latest"},
	} {
		if repo, tag := splitImage(tc.image); repo != tc.repo || tag != tc.tag {
			t.Errorf("splitImage(%q) = %q, %q; want %q, %q", tc.image, repo, tag, tc.repo, tc.tag)
		}
	}
}

func TestUnknownRuntime(t *testing.T) {
	_, err := Start(context.Background(), Options{Runtime: "podman"})
	if err == nil || !strings.Contains(err.Error(), `unknown runtime "podman"`) {
		t.Fatalf("err = %v, want one naming the unknown runtime", err)
	}
}

func TestNoDockerEngine(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
	_, err := Start(context.Background(), Options{Runtime: RuntimeDocker})
	if !errors.Is(err, errNoDocker) || !strings.Contains(err.Error(), "/nonexistent/docker.sock") {
		t.Fatalf("err = %v, want errNoDocker naming the endpoint", err)
	}
}

// dockerPool returns a client of the Docker engine, skipping the test when
// none answers: the Docker runtime is the fallback for machines without
// server binaries, and CI machines have binaries but no engine.
func dockerPool(t *testing.T) *dockertest.Pool {
	t.Helper()
	pool, err := dockertest.NewPool("")
	if err == nil {
		err = pool.Client.Ping()
	}
	if err != nil {
		t.Skipf("no Docker engine: %v", err)
	}
	return pool
}

// leftovers lists the containers and networks of cluster name.
func leftovers(t *testing.T, pool *dockertest.Pool, name string) []string {
	t.Helper()
	ctrs, err := pool.Client.ListContainers(dc.ListContainersOptions{
		All: true, Filters: map[string][]string{"label": {"pgreplica.cluster=" + name}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, c := range ctrs {
		left = append(left, "container "+strings.Join(c.Names, ","))
	}
	nets, err := pool.NetworksByName(name)
	if err != nil {
		t.Fatal(err)
	}
	for range nets {
		left = append(left, "network "+name)
	}
	return left
}

// TestDockerCleanup checks that a Docker cluster that fails to start, and
// one that is closed, leave no container or network behind.
func TestDockerCleanup(t *testing.T) {
	pool := dockerPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	s, err := newDockerServers(ctx, Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{srv: s, logf: t.Logf, nodes: []*node{{index: 0, name: "replica0", upstream: -1}}}
	if c.nodes[0].port, err = reservePort(); err != nil {
		t.Fatal(err)
	}
	err = s.createPrimary(ctx, c.nodes[0], append(serverConf(s.major(), 0), "shared_buffers = 'plenty'"), hbaConf)
	if err == nil {
		t.Fatal("a primary with a bad setting started")
	}
	if err := c.withLogs(err, 0); !strings.Contains(err.Error(), "shared_buffers") {
		t.Fatalf("error does not quote the container's log: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(t, pool, s.name); len(left) > 0 {
		t.Fatalf("failed start left %v", left)
	}

	cl, err := Start(ctx, Options{Runtime: RuntimeDocker, Replicas: 1, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	name := cl.srv.(*dockerServers).name
	if err := cl.Stop(ctx, 1); err != nil { // a stopped container goes too
		t.Fatal(err)
	}
	if err := cl.Close(); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(t, pool, name); len(left) > 0 {
		t.Fatalf("Close left %v", left)
	}
}

// TestNeitherBinariesNorDocker checks the message that tells a newcomer
// what to install.
func TestNeitherBinariesNorDocker(t *testing.T) {
	t.Setenv(binEnv, t.TempDir())
	t.Setenv(RuntimeEnv, "")
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
	_, err := newServers(context.Background(), Options{})
	if !errors.Is(err, ErrNoPostgres) || !errors.Is(err, errNoDocker) {
		t.Fatalf("err = %v, want ErrNoPostgres and errNoDocker", err)
	}
	for _, want := range []string{"apt-get install postgresql", "no Docker engine answered"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// TestFallbackToDocker checks that a machine without server binaries uses
// the Docker engine.
func TestFallbackToDocker(t *testing.T) {
	dockerPool(t)
	t.Setenv(binEnv, t.TempDir())
	t.Setenv(RuntimeEnv, "")
	s, err := newServers(context.Background(), Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer s.close(nil)
	if s.runtime() != RuntimeDocker {
		t.Fatalf("runtime %q without binaries, want docker", s.runtime())
	}
}

// TestFixedPortTaken: a node whose port was asked for is never moved; when
// that port is taken, the error says so (ErrPortTaken), so that the caller
// can pick other ports. A node on a port of ours moves and starts.
func TestFixedPortTaken(t *testing.T) {
	taken := errors.New("could not bind")
	fixed := &node{index: 1, port: 40000, fixedPort: true}
	tries := 0
	err := onFreePort(fixed, t.Logf, func() (bool, error) { tries++; return true, taken })
	if !errors.Is(err, ErrPortTaken) || !errors.Is(err, taken) || tries != 1 || fixed.port != 40000 {
		t.Errorf("fixed port taken: err %v, %d tries, port %d; want ErrPortTaken after 1 try on 40000", err, tries, fixed.port)
	}
	moved := &node{index: 1, port: 40000}
	tries = 0
	err = onFreePort(moved, t.Logf, func() (bool, error) {
		tries++
		if tries == 1 {
			return true, taken
		}
		return false, nil
	})
	defer releasePort(moved.port)
	if err != nil || tries != 2 || moved.port == 40000 {
		t.Errorf("free port taken: err %v, %d tries, port %d; want a start on another port", err, tries, moved.port)
	}
}
