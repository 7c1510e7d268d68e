// Command pgreplica-demo demonstrates on a throwaway local cluster what the
// pgreplica driver is for.
//
//	go run ./integration/cmd/pgreplica-demo [-n 30] [-users 5] [-delay1 50ms] [-delay2 800ms]
//
// It starts a primary and two lagging replicas with the integration
// harness (from the local PostgreSQL binaries, or in containers where a
// Docker engine answers), plays five read-after-write scenarios through a
// naive router and through pgreplica, prints the difference and removes
// the cluster. It lives in the integration module, beside the harness, so
// that the pgreplica command (status) does not link the Docker client.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1 // the demo ran and failed (no PostgreSQL, an error)
	exitUsage = 2 // bad command line
)

func main() {
	// Ctrl-C (or SIGTERM) cancels the context; the demo removes its
	// cluster and returns. A second Ctrl-C, after stop, kills the process
	// at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := runDemo(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
