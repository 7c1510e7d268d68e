package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration"
)

type demoOptions struct {
	runs  int // runs of each scenario through each router
	users int // simulated users at a time
	// delays are the apply delays of the first and second replica.
	delays [2]time.Duration
	// restore removes the delays at the end, for a cluster that outlives
	// the demo (tests share one).
	restore bool
}

func defaultDemoOptions() demoOptions {
	return demoOptions{runs: 30, users: 5, delays: [2]time.Duration{50 * time.Millisecond, 800 * time.Millisecond}}
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o := defaultDemoOptions()
	fs := flag.NewFlagSet("pgreplica-demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.runs, "n", o.runs, "runs of each scenario through each router")
	fs.IntVar(&o.users, "users", o.users, "simulated users at a time")
	fs.DurationVar(&o.delays[0], "delay1", o.delays[0], "apply delay of replica 1 (its replay lag)")
	fs.DurationVar(&o.delays[1], "delay2", o.delays[1], "apply delay of replica 2")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: pgreplica-demo [flags]

Starts a PostgreSQL primary and two streaming replicas on 127.0.0.1 from the
PostgreSQL server binaries installed here, makes the replicas lag (apply
delay), and plays five read-after-write scenarios, each -n times, through a
naive router (writes to the primary, reads round-robin over the replicas) and
through pgreplica (a Session per user, a token in the job message). Prints
how often each scenario showed the bug, where pgreplica's reads went, how
long they waited for a fresh replica and why some fell back to the primary.
The cluster is removed at the end, also on Ctrl-C.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 || o.runs < 1 || o.users < 1 || o.delays[0] < 0 || o.delays[1] < 0 {
		fmt.Fprintln(stderr, "pgreplica-demo: no arguments expected; -n and -users must be positive, delays not negative")
		return exitUsage
	}
	err := demo(ctx, o, stdout)
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, integration.ErrNoPostgres):
		fmt.Fprintf(stderr, "\npgreplica-demo: cannot start a local cluster.\n%v\n", err)
	case ctx.Err() != nil:
		fmt.Fprintln(stderr, "\npgreplica-demo: interrupted; the cluster is stopped and removed")
	default:
		fmt.Fprintln(stderr, "\npgreplica-demo:", err)
	}
	return exitFail
}

// demo starts a cluster, plays, prints the comparison and removes the
// cluster.
func demo(ctx context.Context, o demoOptions, w io.Writer) (err error) {
	fmt.Fprintln(w, "Starting a PostgreSQL primary and 2 streaming replicas on 127.0.0.1 ...")
	began := time.Now()
	cl, err := integration.Start(ctx, integration.Options{Replicas: 2, Logf: func(format string, args ...any) {
		fmt.Fprintf(w, "  %s\n", strings.TrimPrefix(fmt.Sprintf(format, args...), "integration: "))
	}})
	if err != nil {
		return err
	}
	defer func() {
		cerr := cl.Close()
		if cerr == nil {
			fmt.Fprintln(w, "Cluster stopped and removed.")
		}
		err = errors.Join(err, cerr)
	}()
	res, err := play(ctx, cl, o, w)
	if err != nil {
		return err
	}
	fmt.Fprintln(w)
	if err := renderDemo(w, res); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nDemo finished in %v.\n", time.Since(began).Round(100*time.Millisecond))
	return nil
}

// demoResult is what play measured, for the table and for tests.
type demoResult struct {
	runs   int
	delays [2]time.Duration
	budget time.Duration
	naive  routerResult
	pgr    routerResult
}

// routerResult is one router's pass over every scenario.
type routerResult struct {
	// bad counts, per scenario, the runs that showed the bug.
	bad     []int
	reads   int64
	elapsed time.Duration
	// stats are pgreplica's counters (nil for the naive router, which
	// reads replicas only and never waits).
	stats *pgreplica.Stats
}

func (r routerResult) totalBad() int {
	n := 0
	for _, b := range r.bad {
		n += b
	}
	return n
}

// play makes the cluster's two replicas lag, plays every scenario through
// both routers and returns what it saw. With o.restore it removes the lag
// at the end; it keeps the demo tables.
func play(ctx context.Context, cl *integration.Cluster, o demoOptions, w io.Writer) (demoResult, error) {
	res := demoResult{runs: o.runs, delays: o.delays, budget: waitBudget}
	var replicas []int
	for i := range cl.Len() {
		if i != cl.Primary() {
			replicas = append(replicas, i)
		}
	}
	if len(replicas) < 2 {
		return res, fmt.Errorf("the demo needs 2 replicas, the cluster has %d", len(replicas))
	}
	replicas = replicas[:2]
	t := time.Now()
	if err := createTables(ctx, cl, 2*o.runs); err != nil { // rows for both routers
		return res, err
	}
	fmt.Fprintf(w, "\nDemo tables created and replicated in %v.\n", time.Since(t).Round(time.Millisecond))
	t = time.Now()

	if err := setApplyDelays(ctx, cl, replicas, o.delays[:]); err != nil {
		return res, err
	}
	if o.restore {
		defer func() {
			// Undo the lag even when ctx was cancelled.
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_ = setApplyDelays(uctx, cl, replicas, make([]time.Duration, len(replicas)))
		}()
	}
	fmt.Fprintf(w, "Injected lag in %v: replica 1 (port %d) applies WAL %v after the primary commits, replica 2 (port %d) %v.\n",
		time.Since(t).Round(time.Millisecond), cl.Port(replicas[0]), o.delays[0], cl.Port(replicas[1]), o.delays[1])
	fmt.Fprintf(w, "Each scenario runs %d times through each router, %d users at a time.\n", o.runs, o.users)

	fast := replicas[0]
	if o.delays[1] < o.delays[0] {
		fast = replicas[1]
	}
	fastDB, err := sql.Open("pgx", cl.NodeDSN(fast)+"&application_name=demo-observer")
	if err != nil {
		return res, err
	}
	defer fastDB.Close()

	if res.naive, err = playNaive(ctx, cl, &lab{fast: fastDB, cache: newPriceCache()}, ids(1, o.runs), o.users, w); err != nil {
		return res, err
	}
	res.pgr, err = playPgreplica(ctx, cl, &lab{fast: fastDB, cache: newPriceCache()}, ids(o.runs+1, o.runs), o.users, w)
	return res, err
}

// setApplyDelays gives replicas[k] the apply delay delays[k], all at once.
func setApplyDelays(ctx context.Context, cl *integration.Cluster, replicas []int, delays []time.Duration) error {
	errs := make([]error, len(replicas))
	var wg sync.WaitGroup
	for k, i := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[k] = cl.SetApplyDelay(ctx, i, delays[k])
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// createTables makes the demo's tables on the primary with rows 1..rows
// and waits until the replicas have them.
func createTables(ctx context.Context, cl *integration.Cluster, rows int) error {
	primary, err := sql.Open("pgx", cl.NodeDSN(cl.Primary()))
	if err != nil {
		return err
	}
	defer primary.Close()
	for _, q := range schema {
		var args []any
		if strings.Contains(q, "$1") {
			args = append(args, rows)
		}
		if _, err := primary.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("creating the demo tables: %s: %w", q, err)
		}
	}
	return cl.WaitCaughtUp(ctx)
}

func playNaive(ctx context.Context, cl *integration.Cluster, l *lab, ids []int, users int, w io.Writer) (routerResult, error) {
	naive, err := newNaiveRouter(cl)
	if err != nil {
		return routerResult{}, err
	}
	defer naive.close()
	t := time.Now()
	if err := naive.warm(ctx, users); err != nil {
		return routerResult{}, err
	}
	l.r = naive
	return playAll(ctx, "the naive router", time.Since(t), l, ids, users, w)
}

func playPgreplica(ctx context.Context, cl *integration.Cluster, l *lab, ids []int, users int, w io.Writer) (routerResult, error) {
	pgr, err := newPgreplicaRouter(ctx, cl.DSN()+fmt.Sprintf("&pgreplica_wait_budget=%v", waitBudget))
	if err != nil {
		return routerResult{}, err
	}
	defer pgr.close()
	t := time.Now()
	if err := pgr.warm(ctx, users); err != nil {
		return routerResult{}, err
	}
	warmed := time.Since(t)
	// Count from here: warming the pools is not the demo.
	before, err := pgr.stats(ctx)
	if err != nil {
		return routerResult{}, err
	}
	l.r = pgr
	res, err := playAll(ctx, "pgreplica", warmed, l, ids, users, w)
	if err != nil {
		return res, err
	}
	after, err := pgr.stats(ctx)
	if err != nil {
		return res, err
	}
	st := statsSince(after, before)
	res.stats = &st
	return res, nil
}

// waitBudget is how long pgreplica may wait for a fresh replica before it
// reads from the primary: the driver's default, spelled out for the table.
const waitBudget = 150 * time.Millisecond

// ids returns n consecutive row ids from first.
func ids(first, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = first + i
	}
	return out
}

// playAll plays every scenario through one router, whose connection
// pools took warmed to open.
func playAll(ctx context.Context, name string, warmed time.Duration, l *lab, ids []int, users int, w io.Writer) (routerResult, error) {
	var r routerResult
	fmt.Fprintf(w, "\nThrough %s (connection pools opened in %v):\n", name, warmed.Round(time.Millisecond))
	began := time.Now()
	for _, s := range scenarios {
		t := time.Now()
		bad, err := playScenario(ctx, s, l, ids, users)
		if err != nil {
			return r, fmt.Errorf("%s: %w", name, err)
		}
		r.bad = append(r.bad, bad)
		fmt.Fprintf(w, "  %-44s %2d of %d runs saw %s (%v)\n", s.title, bad, len(ids), s.bug, time.Since(t).Round(time.Millisecond))
	}
	r.elapsed = time.Since(began)
	r.reads = l.r.reads()
	return r, nil
}
