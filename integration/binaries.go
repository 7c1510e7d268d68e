package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// ErrNoPostgres reports that no usable PostgreSQL server binaries were found
// (and, unless a runtime was chosen, no Docker engine answered). Start wraps
// it with the places it looked; test it with errors.Is.
var ErrNoPostgres = errors.New("integration: no PostgreSQL server binaries " +
	"(initdb, pg_ctl, postgres) found; install the PostgreSQL " +
	"server package (Debian/Ubuntu: apt-get install postgresql-15; " +
	"Fedora/RHEL: dnf install postgresql-server; macOS: brew install postgresql@15) " +
	"or point Options.BinDir or PGREPLICA_PG_BIN at its bin directory, " +
	"or start a Docker engine for the harness to use")

// binEnv names the environment variable that overrides the binary directory
// when Options.BinDir is empty.
const binEnv = "PGREPLICA_PG_BIN"

// minMajor is the oldest server version the harness supports: PostgreSQL 12
// brought standby.signal, pg_promote() and recovery_target_timeline=latest
// as the default. CI runs pgreplica's tests on 13 to 18.
const minMajor = 12

// serverTools are the programs the harness needs; all must sit in one
// directory.
var serverTools = []string{"initdb", "pg_ctl", "postgres"}

// basebackupTool clones replicas when it sits beside serverTools; without
// it the harness copies the upstream's files itself (see clone.go).
const basebackupTool = "pg_basebackup"

// binaries describes the server installation the harness uses.
type binaries struct {
	dir        string // directory holding serverTools
	major      int    // server major version, e.g. 15
	basebackup bool   // pg_basebackup is there too
}

func (b binaries) path(tool string) string { return filepath.Join(b.dir, tool) }

// findBinaries picks the server binaries: dir if given, else $PGREPLICA_PG_BIN,
// else the directory of initdb on PATH, else the newest of the usual
// installation directories.
func findBinaries(ctx context.Context, dir string) (binaries, error) {
	var candidates []string
	switch {
	case dir != "":
		candidates = []string{dir}
	case os.Getenv(binEnv) != "":
		candidates = []string{os.Getenv(binEnv)}
	default:
		if p, err := exec.LookPath("initdb"); err == nil {
			if r, err := filepath.EvalSymlinks(p); err == nil {
				p = r
			}
			candidates = append(candidates, filepath.Dir(p))
		}
		candidates = append(candidates, wellKnownDirs()...)
	}
	var complaints []string
	for _, d := range candidates {
		if missing := missingTools(d); missing != "" {
			complaints = append(complaints, d+": no "+missing)
			continue
		}
		b := binaries{dir: d}
		major, err := serverMajor(ctx, b.path("postgres"))
		if err != nil {
			complaints = append(complaints, d+": "+err.Error())
			continue
		}
		if major < minMajor {
			complaints = append(complaints, fmt.Sprintf("%s: PostgreSQL %d is older than %d", d, major, minMajor))
			continue
		}
		b.major = major
		b.basebackup = isExecutable(b.path(basebackupTool))
		return b, nil
	}
	if len(candidates) == 0 {
		complaints = append(complaints, "initdb is not on PATH and no usual installation directory exists")
	}
	return binaries{}, fmt.Errorf("%w (%s)", ErrNoPostgres, strings.Join(complaints, "; "))
}

// missingTools returns the first server tool absent from dir, or "".
func missingTools(dir string) string {
	for _, t := range serverTools {
		if !isExecutable(filepath.Join(dir, t)) {
			return t
		}
	}
	return ""
}

// isExecutable reports whether path is a file with an execute bit.
func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// wellKnownDirs lists existing binary directories of common packagings,
// newest major version first.
func wellKnownDirs() []string {
	patterns := []string{
		"/usr/lib/postgresql/*/bin",          // Debian, Ubuntu
		"/usr/pgsql-*/bin",                   // PGDG RPMs
		"/opt/homebrew/opt/postgresql@*/bin", // Homebrew, Apple silicon
		"/usr/local/opt/postgresql@*/bin",    // Homebrew, Intel
		"/Applications/Postgres.app/Contents/Versions/*/bin",
	}
	type dirVer struct {
		dir string
		ver float64
	}
	var found []dirVer
	for _, p := range patterns {
		matches, _ := filepath.Glob(p)
		for _, m := range matches {
			found = append(found, dirVer{m, versionIn(m)})
		}
	}
	sort.SliceStable(found, func(i, j int) bool { return found[i].ver > found[j].ver })
	dirs := make([]string, 0, len(found)+2)
	for _, f := range found {
		dirs = append(dirs, f.dir)
	}
	// Unversioned layouts: source builds and distributions that put the
	// server on a fixed path.
	dirs = append(dirs, "/usr/local/pgsql/bin", "/usr/lib/postgresql/bin")
	return dirs
}

var versionRE = regexp.MustCompile(`(\d+)(?:\.(\d+))?`)

// versionIn extracts the first version number from a path, 0 if none.
func versionIn(s string) float64 {
	m := versionRE.FindAllStringSubmatch(s, -1)
	if m == nil {
		return 0
	}
	last := m[len(m)-1]
	v, _ := strconv.ParseFloat(last[1], 64)
	if last[2] != "" {
		minor, _ := strconv.ParseFloat("0."+last[2], 64)
		v += minor
	}
	return v
}

// serverMajor runs "postgres --version" and returns the major version.
func serverMajor(ctx context.Context, postgres string) (int, error) {
	out, err := exec.CommandContext(ctx, postgres, "--version").Output()
	if err != nil {
		return 0, fmt.Errorf("%s --version: %w", postgres, err)
	}
	// "postgres (PostgreSQL) 15.8 (Debian 15.8-0+deb12u1)"
	m := regexp.MustCompile(`\(PostgreSQL\) (\d+)`).FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("cannot parse %q", strings.TrimSpace(string(out)))
	}
	return strconv.Atoi(string(m[1]))
}
