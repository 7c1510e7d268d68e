// Command pgreplica shows what the pgreplica driver sees in a cluster.
//
//	pgreplica status [-watch] [-interval 1s] [-json] DSN
//	pgreplica version
//	pgreplica help [command]
//
// status prints one row per host of a multi-host DSN: role, state, timeline,
// LSN, lag in bytes and time as pgreplica measures it, replay paused, sync
// state, replay-conflict cancellations, and whether pgreplica would send
// reads there (and why not).
//
// The command links the driver and pgx only. What starts servers is in
// the integration module, with the harness (and with it the Docker
// client): the lagging local cluster to develop against is the command
// integration/cmd/pgreplica-dev, the demo of what the driver is for is
// integration/cmd/pgreplica-demo; "pgreplica dev" and "pgreplica demo"
// say so.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1 // the command ran and failed (no node reachable)
	exitUsage = 2 // bad command line
)

func main() {
	// Ctrl-C (or SIGTERM) cancels the context; commands clean up and
	// return. A second Ctrl-C, after stop, kills the process at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches a command line and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "status":
		return runStatus(ctx, rest, stdout, stderr)
	case "version":
		return runVersion(rest, stdout, stderr)
	case "dev":
		fmt.Fprintln(stderr, devMoved)
		return exitUsage
	case "demo":
		fmt.Fprintln(stderr, demoMoved)
		return exitUsage
	case "help", "-h", "-help", "--help":
		if len(rest) > 0 {
			return run(ctx, []string{rest[0], "-h"}, stdout, stderr)
		}
		usage(stdout)
		return exitOK
	}
	fmt.Fprintf(stderr, "pgreplica: unknown command %q\n\n", cmd)
	usage(stderr)
	return exitUsage
}

// devMoved and demoMoved are what "pgreplica dev" and "pgreplica demo"
// print: they start servers with the harness, so they are commands of the
// integration module.
const (
	devMoved = "pgreplica: dev is its own command now, beside the harness that starts the servers: " +
		"go install github.com/pgreplica/pgreplica/integration/cmd/pgreplica-dev@latest, " +
		"or in a checkout of the repository: go run ./integration/cmd/pgreplica-dev"
	demoMoved = "pgreplica: the demo is its own command now; in a checkout of the repository run: go run ./integration/cmd/pgreplica-demo"
)

func usage(w io.Writer) {
	fmt.Fprint(w, `pgreplica: inspect a PostgreSQL primary and its replicas as the pgreplica
driver sees them.

Usage:

  pgreplica status [flags] DSN   one row per host: role, lag, paused, conflicts,
                                 whether reads go there and why not
  pgreplica version              the command's version and the driver's it links
  pgreplica help [command]       this text, or a command's flags

The DSN is any DSN the driver accepts, listing every host, e.g.
  postgres://app@db1:5432,db2:5432,db3:5432/shop?sslmode=disable
Its password may come from PGPASSWORD or ~/.pgpass instead; the DSN may also
be given in the environment variable PGREPLICA_DSN.

Examples:

  pgreplica status -watch 'postgres://postgres@127.0.0.1:5433,127.0.0.1:5434/postgres'
  pgreplica status -json "$PGREPLICA_DSN" | jq '.[] | select(.reads | not)'

A local primary + lagging replicas to develop against (prints the DSN, runs
until Ctrl-C; lag, pause and resume from another terminal) is a command of
its own: pgreplica-dev, in the integration module beside the harness that
starts them:
  go install github.com/pgreplica/pgreplica/integration/cmd/pgreplica-dev@latest
The demo of what the driver is for (a local primary + 2 lagging replicas,
five read-after-write scenarios through a naive router and through
pgreplica) is another: go run ./integration/cmd/pgreplica-demo
`)
}

// flagExit maps a flag parsing error to an exit code: -h is not a failure.
func flagExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	return exitUsage
}
