package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica/integration"
)

// cluster is one primary and two replicas shared by the package's
// integration tests; nil when no PostgreSQL is installed (they skip).
var cluster *integration.Cluster

func TestMain(m *testing.M) {
	os.Exit(integration.Main(m, integration.Options{Replicas: 2}, &cluster))
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestHelpAndUnknownCommand(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	for _, c := range []struct {
		args []string
		code int
		out  string // in stdout
		err  string // in stderr
	}{
		{[]string{"help"}, exitOK, "pgreplica status [flags] DSN", ""},
		{[]string{"help", "status"}, exitOK, "", "-watch"},
		{[]string{"demo", "-h"}, exitOK, "", "-delay1"},
		{nil, exitUsage, "", "Usage:"},
		{[]string{"frobnicate"}, exitUsage, "", `unknown command "frobnicate"`},
		{[]string{"status"}, exitUsage, "", "no DSN given"},
		{[]string{"status", "-nope", "x"}, exitUsage, "", "flag provided but not defined"},
		{[]string{"status", "postgres://h1/db?pgreplica_bogus=1"}, exitUsage, "", "unknown option"},
		{[]string{"demo", "-n", "0"}, exitUsage, "", "must be positive"},
	} {
		var out, errOut bytes.Buffer
		t.Setenv(dsnEnv, "")
		code := run(ctx, c.args, &out, &errOut)
		if code != c.code || !strings.Contains(out.String(), c.out) || !strings.Contains(errOut.String(), c.err) {
			t.Errorf("run %q = %d, stdout %q, stderr %q; want %d, %q in stdout, %q in stderr",
				c.args, code, out.String(), errOut.String(), c.code, c.out, c.err)
		}
	}
}

func TestParseFlagsAfterPositional(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	j := fs.Bool("json", false, "")
	d := fs.Duration("sample", 0, "")
	pos, err := parseFlags(fs, []string{"-sample", "2s", "dsn", "-json"})
	if err != nil || len(pos) != 1 || pos[0] != "dsn" || !*j || *d != 2*time.Second {
		t.Fatalf("parseFlags = %q, %v; json %v sample %v", pos, err, *j, *d)
	}
}

// TestDemoSaysWhatToInstall runs the demo where there are neither
// PostgreSQL server binaries nor a Docker engine: it must name the package
// to install and exit 1.
func TestDemoSaysWhatToInstall(t *testing.T) {
	t.Setenv("PGREPLICA_PG_BIN", t.TempDir())
	t.Setenv(integration.RuntimeEnv, "")
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
	var out, errOut bytes.Buffer
	code := run(testCtx(t, 30*time.Second), []string{"demo"}, &out, &errOut)
	if code != exitFail {
		t.Errorf("exit code %d, want %d", code, exitFail)
	}
	for _, want := range []string{"apt-get install postgresql-15", "Docker engine"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr does not mention %q:\n%s", want, errOut.String())
		}
	}
}
