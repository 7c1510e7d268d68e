// Command pgreplica shows what the pgreplica driver sees in a cluster, and
// demonstrates on a throwaway local cluster what it is for.
//
//	pgreplica status [-watch] [-interval 1s] [-json] DSN
//	pgreplica demo [-n 30] [-users 5] [-delay1 50ms] [-delay2 800ms]
//	pgreplica help [command]
//
// status prints one row per host of a multi-host DSN: role, state, timeline,
// LSN, lag in bytes and time as pgreplica measures it, replay paused, sync
// state, replay-conflict cancellations, and whether pgreplica would send
// reads there (and why not). demo starts a primary and two lagging replicas
// from the local PostgreSQL binaries, plays five read-after-write scenarios
// through a naive router and through pgreplica, prints the difference and
// removes the cluster.
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
	exitFail  = 1 // the command ran and failed (no node reachable, demo error)
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
	case "demo":
		return runDemo(ctx, rest, stdout, stderr)
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

func usage(w io.Writer) {
	fmt.Fprint(w, `pgreplica: inspect a PostgreSQL primary and its replicas as the pgreplica
driver sees them, or watch a demo of what the driver is for.

Usage:

  pgreplica status [flags] DSN   one row per host: role, lag, paused, conflicts,
                                 whether reads go there and why not
  pgreplica demo [flags]         start a local primary + 2 lagging replicas, play
                                 five read-after-write scenarios through a naive
                                 router and through pgreplica, compare
  pgreplica help [command]       this text, or a command's flags

The DSN is any DSN the driver accepts, listing every host, e.g.
  postgres://app@db1:5432,db2:5432,db3:5432/shop?sslmode=disable
Its password may come from PGPASSWORD or ~/.pgpass instead; the DSN may also
be given in the environment variable PGREPLICA_DSN.

Examples:

  go run ./cmd/pgreplica demo
  pgreplica status -watch 'postgres://postgres@127.0.0.1:5433,127.0.0.1:5434/postgres'
  pgreplica status -json "$PGREPLICA_DSN" | jq '.[] | select(.reads | not)'
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
