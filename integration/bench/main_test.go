package bench

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"testing"

	"github.com/pgreplica/pgreplica/integration"
)

var cluster *integration.Cluster

func TestMain(m *testing.M) {
	os.Exit(integration.Main(m, clusterOptions(), &cluster))
}

// clusterOptions asks for a primary and two replicas and, when the server
// binaries ship pg_stat_statements, preloads it so that TestRoundTrips can
// count the statements each operation makes the servers run. The binary
// directory is then passed explicitly, so the library and the server come
// from the same installation.
//
// PGREPLICA_BENCH_FSYNC=on runs the servers durably (fsync and full page
// writes on; synchronous_commit is on either way): loopback with fsync off
// is the harshest case for pgreplica's relative cost, fsync on the usual
// one.
func clusterOptions() integration.Options {
	opts := integration.Options{Replicas: 2}
	if os.Getenv("PGREPLICA_BENCH_FSYNC") == "on" {
		opts.ExtraConf = append(opts.ExtraConf, "fsync = on", "full_page_writes = on")
	}
	dir := serverBinDir()
	if dir == "" {
		return opts
	}
	if _, err := os.Stat(filepath.Join(dir, "..", "lib", "pg_stat_statements.so")); err != nil {
		return opts
	}
	opts.BinDir = dir
	opts.ExtraConf = append(opts.ExtraConf,
		"shared_preload_libraries = 'pg_stat_statements'",
		"pg_stat_statements.track_utility = on",
	)
	return opts
}

// serverBinDir finds the server binaries the way the harness does
// ($PGREPLICA_PG_BIN, initdb on PATH, the newest Debian or PGDG
// installation), or returns "" and leaves the choice to the harness.
func serverBinDir() string {
	if d := os.Getenv("PGREPLICA_PG_BIN"); d != "" {
		return d
	}
	var dirs []string
	if p, err := exec.LookPath("initdb"); err == nil {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		dirs = append(dirs, filepath.Dir(p))
	}
	var installed []string
	for _, pattern := range []string{"/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin"} {
		m, _ := filepath.Glob(pattern)
		installed = append(installed, m...)
	}
	sort.SliceStable(installed, func(i, j int) bool { return majorOf(installed[i]) > majorOf(installed[j]) })
	dirs = append(dirs, installed...)
	for _, d := range dirs {
		if fi, err := os.Stat(filepath.Join(d, "postgres")); err == nil && !fi.IsDir() {
			return d
		}
	}
	return ""
}

// majorOf reads the version in ".../15/bin" or "/usr/pgsql-15/bin".
func majorOf(binDir string) int {
	base := filepath.Base(filepath.Dir(binDir))
	if i := len(base) - 1; i >= 0 {
		j := i
		for j >= 0 && base[j] >= '0' && base[j] <= '9' {
			j--
		}
		n, _ := strconv.Atoi(base[j+1:])
		return n
	}
	return 0
}
