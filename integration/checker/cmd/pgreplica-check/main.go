// Command pgreplica-check runs the consistency checker on a PostgreSQL
// primary and two streaming replicas it starts on loopback from the local
// server binaries (see package integration), and prints a report.
//
//	go run ./integration/checker/cmd/pgreplica-check -duration 1m
//	go run ./integration/checker/cmd/pgreplica-check -long
//	go run ./integration/checker/cmd/pgreplica-check -shapes all -duration 25s
//
// Each target runs the same workload in turn (see package checker), with
// lag, paused replay and (unless -kill=false) replicas killed and
// restarted. The exit status is 0 when pgreplica showed no violation and
// no failed operation (reads that failed because a replica was down are
// tolerated) and the naive router showed violations, 1 otherwise, 2 for
// bad flags.
//
// With -shapes, every target runs through each deployment shape in turn
// (see checker.Deploy: PgBouncer per node in session or transaction mode,
// an HAProxy reader endpoint, PgBouncer in front of it), with the shape's
// proxies restarted every -restart-proxies, and a table per shape and
// target ends the output.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/pgreplica/pgreplica/integration"
	"github.com/pgreplica/pgreplica/integration/checker"
)

func main() {
	os.Exit(run())
}

func run() int {
	var (
		duration = flag.Duration("duration", checker.DefaultDuration, "how long each target runs")
		sessions = flag.Int("sessions", checker.DefaultSessions, "concurrent sessions")
		keys     = flag.Int("keys", checker.DefaultKeys, "rows per session")
		long     = flag.Bool("long", false, "long mode: 2m per target unless -duration is given, and pgreplica with lib/pq as well")
		targets  = flag.String("targets", "pgreplica-session,pgreplica-process,pgreplicapgx-session,naive", "comma-separated targets; target/pq or target/pgx sets that one's inner driver")
		driver   = flag.String("driver", "pgx", "pgreplica's inner driver: pgx or pq")
		seed     = flag.Uint64("seed", 0, "seed of the sessions' and the injector's choices (0: from the clock)")
		details  = flag.Int("details", 10, "violations and errors to print per target")
		binDir   = flag.String("bin", "", "directory of the PostgreSQL server binaries (default: $PGREPLICA_PG_BIN or the newest installed)")
		verbose  = flag.Bool("v", false, "print progress")
		kill     = flag.Bool("kill", true, "kill a replica with SIGKILL and restart it every 8s, so that it comes back behind what it served")
		shapes   = flag.String("shapes", "", `run every target through these deployment shapes ("all", or a comma-separated list of `+shapeNames()+`), with real PgBouncer and HAProxy processes, and print a table per shape and target`)
		restarts = flag.Duration("restart-proxies", 20*time.Second, "with -shapes: restart the shape's PgBouncer and HAProxy processes this often (0: never)")
	)
	flag.Parse()
	durationSet := false
	flag.Visit(func(f *flag.Flag) { durationSet = durationSet || f.Name == "duration" })
	if *long && !durationSet {
		*duration = 2 * time.Minute
	}
	var runs []checker.Options
	for _, name := range strings.Split(*targets, ",") {
		// "target/driver" chooses the driver of that target alone.
		name, only, _ := strings.Cut(strings.TrimSpace(name), "/")
		t, err := checker.ParseTarget(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		drivers := []string{*driver}
		switch {
		case only != "":
			drivers = []string{only}
		case *long && t.Pgreplica() && *driver == "pgx":
			drivers = append(drivers, "pq")
		}
		for _, d := range drivers {
			runs = append(runs, checker.Options{Target: t, Driver: d, Sessions: *sessions, Keys: *keys, Duration: *duration, Seed: *seed,
				Faults: checker.Faults{KillRestart: *kill, RestartProxies: *restarts > 0, ProxyRestartEvery: *restarts}})
		}
	}
	logf := func(string, ...any) {}
	if *verbose {
		logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cl, err := integration.Start(ctx, integration.Options{Replicas: 2, BinDir: *binDir, Logf: logf})
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgreplica-check: starting the cluster: %v\n", err)
		return 1
	}
	defer cl.Close()

	if *shapes != "" {
		return runShapes(ctx, cl, *shapes, runs, logf, *details)
	}

	ok := true
	var reports []*checker.Report
	for _, o := range runs {
		o.Logf = logf
		rep, err := checker.Run(ctx, cl, o)
		if rep != nil {
			reports = append(reports, rep)
			rep.WriteDetails(os.Stdout, *details)
			ok = ok && passed(rep)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "pgreplica-check: %v\n", err)
			ok = false
			if ctx.Err() != nil {
				break
			}
		}
	}
	fmt.Println()
	if err := checker.WriteTable(os.Stdout, reports...); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if !ok {
		return 1
	}
	return 0
}

// passed applies the checker's verdict: pgreplica clean, the naive router
// caught.
func passed(r *checker.Report) bool {
	if r.Target.Pgreplica() {
		return len(r.Violations) == 0 && r.Errors == 0
	}
	return r.Count(checker.ReadYourWrites) > 0
}

// shapeNames lists the shapes for -help.
func shapeNames() string {
	var names []string
	for _, s := range checker.Shapes() {
		names = append(names, string(s))
	}
	return strings.Join(names, ", ")
}

// runShapes runs every run through each shape of spec and prints the
// matrix, with the same verdict as without -shapes.
func runShapes(ctx context.Context, cl *integration.Cluster, spec string, runs []checker.Options, logf func(string, ...any), details int) int {
	shapes := checker.Shapes()
	if spec != "all" {
		shapes = nil
		for _, name := range strings.Split(spec, ",") {
			s, err := checker.ParseShape(strings.TrimSpace(name))
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 2
			}
			shapes = append(shapes, s)
		}
	}
	for i := range runs {
		runs[i].Logf = logf
	}
	ok := true
	results := checker.RunMatrix(ctx, cl, shapes, runs, func(m checker.MatrixRun) {
		if m.Report != nil {
			m.Report.WriteDetails(os.Stdout, details)
			ok = ok && passed(m.Report)
		}
		if m.Err != nil {
			fmt.Fprintf(os.Stderr, "pgreplica-check: %s, %s: %v\n", m.Shape, m.Name(), m.Err)
			ok = false
		}
	})
	fmt.Println()
	if err := checker.WriteMatrix(os.Stdout, results); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if !ok {
		return 1
	}
	return 0
}
