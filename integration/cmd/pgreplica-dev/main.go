// Command pgreplica-dev runs a lagging local cluster to develop against.
//
//	pgreplica-dev [-replicas 2] [-lag 200ms] [-port P] [-dir D] [-every 2s]
//	pgreplica-dev [-dir D] lag N DURATION | pause N | resume N | status
//
// It starts a primary and streaming replicas on 127.0.0.1 with the
// integration harness (the local PostgreSQL server binaries, else Docker),
// gives every replica an apply delay (recovery_min_apply_delay), prints the
// multi-host DSN and an export PGREPLICA_DSN=... line, shows each
// replica's lag while it runs, and on Ctrl-C stops the servers and removes
// their data (-dir keeps it there, and the next pgreplica-dev on that
// directory starts the same cluster again). From another terminal,
// "pgreplica-dev lag 1 500ms", "pause 2", "resume 2" and "status" change or
// show the lag of the running one: it publishes a loopback control
// address and token in a state file readable by its user only (in -dir,
// else in $XDG_RUNTIME_DIR/pgreplica or the user cache directory). In the
// running one, lines typed on standard input do the same: a replica's
// number selects it, + and - double or halve its lag, p pauses or resumes
// it, q quits.
//
// It is a command of the integration module, beside the harness it links
// (and with it the Docker client), so that the pgreplica command and the
// driver module need neither:
//
//	go install github.com/pgreplica/pgreplica/integration/cmd/pgreplica-dev@latest
//	go run ./integration/cmd/pgreplica-dev    (in a checkout of the repository)
package main

import (
	"context"
	"errors"
	"flag"
	"os"
	"os/signal"
	"syscall"
)

// Exit codes, as the pgreplica command's.
const (
	exitOK    = 0
	exitFail  = 1 // the command ran and failed (no cluster, no running dev)
	exitUsage = 2 // bad command line
)

func main() {
	// Ctrl-C (or SIGTERM) cancels the context; the cluster is stopped and
	// removed before run returns. A second Ctrl-C, after stop, kills the
	// process at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// flagExit maps a flag parsing error to an exit code: -h is not a failure.
func flagExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	return exitUsage
}
