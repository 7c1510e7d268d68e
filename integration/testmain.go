package integration

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"testing"
)

// RequireEnv names the environment variable that, set to "require", turns
// a missing PostgreSQL installation from a skip into a failure (for CI).
const RequireEnv = "PGREPLICA_INTEGRATION"

func required() bool { return os.Getenv(RequireEnv) == "require" }

// Main starts one cluster for a whole test package; call it from TestMain:
//
//	var cluster *integration.Cluster
//
//	func TestMain(m *testing.M) {
//		os.Exit(integration.Main(m, integration.Options{}, &cluster))
//	}
//
// It sets *c, runs the tests, closes the cluster and returns the exit code.
// When no PostgreSQL is installed it prints why and runs the tests with *c
// nil, so that Need skips them; with PGREPLICA_INTEGRATION=require it
// fails instead. Any other start failure prints the error with the end of
// the server logs and returns 1. Progress goes to stderr with -v when
// opts.Logf is nil.
func Main(m *testing.M, opts Options, c **Cluster) int {
	*c = nil
	if !flag.Parsed() {
		flag.Parse() // for testing.Verbose; m.Run does not parse twice
	}
	if opts.Logf == nil && testing.Verbose() {
		opts.Logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	cl, err := Start(ctx, opts)
	cancel()
	switch {
	case errors.Is(err, ErrNoPostgres) && !required():
		fmt.Fprintf(os.Stderr, "integration: SKIPPING tests that need PostgreSQL: %v\n"+
			"(set %s=require to make this a failure)\n", err, RequireEnv)
		return m.Run()
	case err != nil:
		fmt.Fprintf(os.Stderr, "integration: cannot start the test cluster: %v\n", err)
		return 1
	}
	*c = cl
	// Deferred so that the servers go even if m.Run panics in this
	// goroutine; a panic in a test goroutine kills the process without
	// running defers, and the watchdog cleans up then.
	defer cl.Close()
	return m.Run()
}

// Need skips t when c is nil, that is when Main found no PostgreSQL
// installation, with a message saying what to install. With
// PGREPLICA_INTEGRATION=require it fails t instead.
func (c *Cluster) Need(t testing.TB) {
	t.Helper()
	if c != nil {
		return
	}
	msg := ErrNoPostgres.Error() + " (or the test package did not start a cluster with integration.Main)"
	if required() {
		t.Fatal(msg)
	}
	t.Skip(msg)
}
