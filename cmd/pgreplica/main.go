// Command pgreplica shows what the pgreplica driver sees in a cluster, and
// runs a lagging local cluster to develop against.
//
//	pgreplica status [-watch] [-interval 1s] [-json] DSN
//	pgreplica dev [-replicas 2] [-lag 200ms] [-port P] [-dir D] [-every 2s]
//	pgreplica dev [-dir D] lag N DURATION | pause N | resume N | status
//	pgreplica help [command]
//
// status prints one row per host of a multi-host DSN: role, state, timeline,
// LSN, lag in bytes and time as pgreplica measures it, replay paused, sync
// state, replay-conflict cancellations, and whether pgreplica would send
// reads there (and why not).
//
// dev starts a primary and streaming replicas on 127.0.0.1 with the
// integration harness (the local PostgreSQL server binaries, else Docker),
// gives every replica an apply delay (recovery_min_apply_delay), prints the
// multi-host DSN and an export PGREPLICA_DSN=... line, shows each
// replica's lag while it runs, and on Ctrl-C stops the servers and removes
// their data (-dir keeps it there, and the next dev on that directory
// starts the same cluster again). From another terminal, "pgreplica dev
// lag 1 500ms", "pause 2", "resume 2" and "status" change or show the lag
// of the running dev: it publishes a loopback control address and token in
// a state file readable by its user only (in -dir, else in
// $XDG_RUNTIME_DIR/pgreplica or the user cache directory). In the running
// dev, lines typed on standard input do the same: a replica's number
// selects it, + and - double or halve its lag, p pauses or resumes it, q
// quits.
//
// This command is a module of its own, so that linking the harness (and
// with it the Docker client) leaves the driver module's dependencies
// alone. The demo of what the driver is for is the command
// integration/cmd/pgreplica-demo: go run ./integration/cmd/pgreplica-demo
// in a checkout of the repository.
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
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches a command line and returns the exit code. stdin may be
// nil: dev then reads no keys.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "status":
		return runStatus(ctx, rest, stdout, stderr)
	case "dev":
		return runDev(ctx, rest, stdin, stdout, stderr)
	case "demo":
		fmt.Fprintln(stderr, demoMoved)
		return exitUsage
	case "help", "-h", "-help", "--help":
		if len(rest) > 0 {
			return run(ctx, []string{rest[0], "-h"}, nil, stdout, stderr)
		}
		usage(stdout)
		return exitOK
	}
	fmt.Fprintf(stderr, "pgreplica: unknown command %q\n\n", cmd)
	usage(stderr)
	return exitUsage
}

// demoMoved is what "pgreplica demo" prints: the demo is a command of the
// integration module now.
const demoMoved = "pgreplica: the demo is its own command now; in a checkout of the repository run: go run ./integration/cmd/pgreplica-demo"

func usage(w io.Writer) {
	fmt.Fprint(w, `pgreplica: inspect a PostgreSQL primary and its replicas as the pgreplica
driver sees them.

Usage:

  pgreplica status [flags] DSN   one row per host: role, lag, paused, conflicts,
                                 whether reads go there and why not
  pgreplica dev [flags]          a local primary + lagging replicas to develop
                                 against: prints the DSN, runs until Ctrl-C
  pgreplica dev lag N DURATION   from another terminal: replica N's lag;
  pgreplica dev pause|resume N   pause or resume its replay; or status
  pgreplica help [command]       this text, or a command's flags

The DSN is any DSN the driver accepts, listing every host, e.g.
  postgres://app@db1:5432,db2:5432,db3:5432/shop?sslmode=disable
Its password may come from PGPASSWORD or ~/.pgpass instead; the DSN may also
be given in the environment variable PGREPLICA_DSN.

Examples:

  pgreplica status -watch 'postgres://postgres@127.0.0.1:5433,127.0.0.1:5434/postgres'
  pgreplica status -json "$PGREPLICA_DSN" | jq '.[] | select(.reads | not)'
  pgreplica dev -replicas 2 -lag 300ms      (then in another terminal:)
  pgreplica dev lag 2 2s

The demo of what the driver is for (a local primary + 2 lagging replicas,
five read-after-write scenarios through a naive router and through
pgreplica) is a command of its own: go run ./integration/cmd/pgreplica-demo
`)
}

// parseFlags parses args with fs, allowing flags after the positional
// arguments too (the flag package stops at the first one): "status DSN
// -json" works like "status -json DSN". It returns the positional
// arguments, or an error already reported by fs (flag.ErrHelp for -h).
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// flagExit maps a flag parsing error to an exit code: -h is not a failure.
func flagExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	return exitUsage
}
