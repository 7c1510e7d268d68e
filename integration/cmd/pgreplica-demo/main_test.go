package main

import (
	"bytes"
	"context"
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

func TestFlags(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	for _, c := range []struct {
		args []string
		code int
		out  string // in stdout
		err  string // in stderr
	}{
		{[]string{"-h"}, exitOK, "", "-delay1"},
		{[]string{"-n", "0"}, exitUsage, "", "must be positive"},
		{[]string{"frobnicate"}, exitUsage, "", "no arguments expected"},
		{[]string{"-nope"}, exitUsage, "", "flag provided but not defined"},
	} {
		var out, errOut bytes.Buffer
		code := runDemo(ctx, c.args, &out, &errOut)
		if code != c.code || !strings.Contains(out.String(), c.out) || !strings.Contains(errOut.String(), c.err) {
			t.Errorf("runDemo %q = %d, stdout %q, stderr %q; want %d, %q in stdout, %q in stderr",
				c.args, code, out.String(), errOut.String(), c.code, c.out, c.err)
		}
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
	code := runDemo(testCtx(t, 30*time.Second), nil, &out, &errOut)
	if code != exitFail {
		t.Errorf("exit code %d, want %d", code, exitFail)
	}
	for _, want := range []string{"apt-get install postgresql-15", "Docker engine"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr does not mention %q:\n%s", want, errOut.String())
		}
	}
}
