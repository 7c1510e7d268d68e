// Command pgreplica-fleet measures what a fleet of small processes costs
// the servers, plain pgx against pgreplica: the budget of DESIGN.md's
// "What a fleet pays" (per write across the fleet, not only inside one
// busy process).
//
//	go run ./integration/cmd/pgreplica-fleet [-p 1,4,16,48] [-duration 20s] [-warmup 3s] [-idle 10s]
//
// It starts a PostgreSQL primary and two streaming replicas on 127.0.0.1
// with the integration harness (pg_stat_statements preloaded, as
// integration/bench does), and then, for each P of -p and each side in
// turn (pgx P=1, pgreplica P=1, pgx P=4, …), re-executes itself as P
// worker processes. Each worker has its own *sql.DB and does -writes
// autocommit INSERTs and -reads reads a second (a read of the row it wrote
// last, with the process's default consistency):
//
//   - pgx: sql.Open("pgx", primary) from pgx/v5/stdlib, writes and reads
//     on the primary;
//   - pgreplica: sql.Open("pgreplica", every node), default settings.
//
// After a warm-up it measures, over -duration, what the primary pays per
// write: the statements it ran (pg_stat_statements, sum of calls, every
// statement but the meter's own: pgreplica's probes and captures count)
// and the CPU time of the postmaster and all its processes
// (/proc/<pid>/schedstat), each divided by the writes that completed in
// the window; the write and read latencies (p50, p99, sent by the workers
// as JSON lines on their stdout); the share of reads a replica served
// (inet_server_port() of the read); and the client connections of every
// server (pg_stat_activity). Then the workers stop, stay connected, and
// over -idle it measures every server's statements and CPU time a second.
//
// It prints one markdown table (stdout; progress goes to stderr) and the
// ratios pgreplica/pgx of statements and CPU per write; -statements also
// prints on stderr what the primary ran in each window, by statement. The servers run
// with fsync off and autovacuum off (noise in a CPU window), and with
// max_connections = 500 for 48 processes of each side. The cluster and
// the workers go at the end, on an error, and on Ctrl-C or SIGTERM;
// workers also exit when the parent dies (end of their stdin, and on
// Linux a parent-death signal).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pgreplica/pgreplica/integration"
)

// options are the command's flags.
type options struct {
	procs     []int
	duration  time.Duration
	warmup    time.Duration
	idle      time.Duration
	writeRate float64
	readRate  float64
	timeout   time.Duration
	binDir    string
	byQuery   bool
	params    string // -params: pgreplica_* options of the pgreplica side
}

// sides are compared in this order for every P.
var sides = []string{sidePgx, sidePgreplica}

const (
	sidePgx       = "pgx"
	sidePgreplica = "pgreplica"
)

// table is the fleet's table: ids are chosen by the workers (see
// workerConfig.firstID), so that a worker knows which row it wrote without
// a RETURNING.
const table = "fleet"

func main() {
	if spec := os.Getenv(workerEnv); spec != "" {
		os.Exit(runWorker(spec))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string) int {
	var o options
	fs := flag.NewFlagSet("pgreplica-fleet", flag.ContinueOnError)
	procs := fs.String("p", "1,4,16,48", "comma-separated numbers of worker processes")
	fs.DurationVar(&o.duration, "duration", 20*time.Second, "measured window of each run")
	fs.DurationVar(&o.warmup, "warmup", 3*time.Second, "load before the measured window")
	fs.DurationVar(&o.idle, "idle", 10*time.Second, "idle window: workers connected, doing nothing")
	fs.Float64Var(&o.writeRate, "writes", 20, "autocommit INSERTs a second per worker")
	fs.Float64Var(&o.readRate, "reads", 4, "reads a second per worker")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "timeout of each statement and of a worker's connect")
	fs.StringVar(&o.binDir, "bindir", "", "PostgreSQL server binaries (default: $PGREPLICA_PG_BIN, else the newest /usr/lib/postgresql/*/bin)")
	fs.StringVar(&o.params, "params", "", "pgreplica_* options for the pgreplica side, as DSN parameters (a=b&c=d)")
	fs.BoolVar(&o.byQuery, "statements", false, "print on stderr the primary's statements per write of each window, by statement")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	for _, s := range strings.Split(*procs, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 1000 {
			fmt.Fprintf(os.Stderr, "pgreplica-fleet: -p: %q is not a number of processes\n", s)
			return 2
		}
		o.procs = append(o.procs, n)
	}
	if fs.NArg() > 0 || o.duration <= 0 || o.warmup < 0 || o.idle <= 0 || o.writeRate <= 0 || o.readRate <= 0 || o.timeout <= 0 {
		fmt.Fprintln(os.Stderr, "pgreplica-fleet: no arguments expected; durations, rates and timeout must be positive")
		return 2
	}
	began := time.Now()
	results, hdr, err := fleet(ctx, o)
	if len(results) > 0 {
		printReport(os.Stdout, hdr, results)
	}
	switch {
	case err == nil:
		fmt.Fprintf(os.Stderr, "pgreplica-fleet: done in %v\n", time.Since(began).Round(time.Second))
		return 0
	case ctx.Err() != nil:
		fmt.Fprintln(os.Stderr, "pgreplica-fleet: interrupted; workers and cluster stopped")
	default:
		fmt.Fprintln(os.Stderr, "pgreplica-fleet:", err)
	}
	return 1
}

// logf prints progress on stderr.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// fleet starts the cluster, runs every (P, side) in turn and removes the
// cluster. It returns the results of the runs that finished.
func fleet(ctx context.Context, o options) (results []result, hdr header, err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, hdr, err
	}
	opts := integration.Options{
		Replicas: 2,
		BinDir:   serverBinDir(o.binDir),
		Logf:     logf,
		ExtraConf: []string{
			"max_connections = 500",
			"autovacuum = off",
		},
	}
	pss := opts.BinDir != "" && exists(filepath.Join(opts.BinDir, "..", "lib", "pg_stat_statements.so"))
	if pss {
		opts.ExtraConf = append(opts.ExtraConf,
			"shared_preload_libraries = 'pg_stat_statements'",
			"pg_stat_statements.track_utility = on",
		)
	} else {
		logf("no pg_stat_statements with these server binaries: statements are not counted")
	}
	startCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	cl, err := integration.Start(startCtx, opts)
	cancel()
	if err != nil {
		return nil, hdr, err
	}
	defer func() {
		if cerr := cl.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		} else {
			logf("cluster stopped and removed")
		}
	}()

	setupCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	p := cl.Primary()
	setup := fmt.Sprintf(`DROP TABLE IF EXISTS %[1]s;
		CREATE TABLE %[1]s (id bigint PRIMARY KEY, worker int NOT NULL, v text NOT NULL)`, table)
	if pss {
		setup = "CREATE EXTENSION IF NOT EXISTS pg_stat_statements; " + setup
	}
	if err := cl.Exec(setupCtx, p, setup); err != nil {
		return nil, hdr, err
	}
	if err := cl.WaitCaughtUp(setupCtx); err != nil {
		return nil, hdr, err
	}
	m, err := newMeter(setupCtx, cl, pss)
	if err != nil {
		return nil, hdr, err
	}
	defer m.close()
	hdr = newHeader(setupCtx, cl, o)

	run := 0
	for _, n := range o.procs {
		for _, side := range sides {
			run++
			// A checkpoint before each run, so that no timed one falls
			// in a window, and replicas caught up.
			prepCtx, cancel := context.WithTimeout(ctx, time.Minute)
			err := cl.Exec(prepCtx, p, "CHECKPOINT")
			if err == nil {
				err = cl.WaitCaughtUp(prepCtx)
			}
			cancel()
			if err != nil {
				return results, hdr, err
			}
			logf("run %d: %s, P=%d", run, side, n)
			r, err := runOne(ctx, cl, m, exe, o, side, n, run)
			if err != nil {
				return results, hdr, fmt.Errorf("%s P=%d: %w", side, n, err)
			}
			logf("run %d: %s", run, r.summary())
			results = append(results, r)
		}
	}
	return results, hdr, nil
}

// runOne runs one side with n worker processes: start, warm-up, measured
// window, idle window, stop.
func runOne(ctx context.Context, cl *integration.Cluster, m *meter, exe string, o options, side string, n, run int) (r result, err error) {
	ctx, cancel := context.WithTimeout(ctx, o.warmup+o.duration+o.idle+3*time.Minute)
	defer cancel()
	p := cl.Primary()
	dsn := cl.NodeDSN(p) + "&application_name=fleet-pgx"
	if side == sidePgreplica {
		dsn = cl.DSN() + "&application_name=fleet-pgreplica"
		if o.params != "" {
			dsn += "&" + o.params
		}
	}
	sink := &samples{}
	var procs []*workerProc
	defer func() { err = errors.Join(err, stopWorkers(procs)) }()
	for i := range n {
		w, err := startWorker(exe, workerConfig{
			Side: side, DSN: dsn, Run: run, Index: i,
			WriteRate: o.writeRate, ReadRate: o.readRate, Timeout: o.timeout,
		}, sink)
		if err != nil {
			return r, err
		}
		procs = append(procs, w)
	}
	if err := eachWorker(ctx, procs, "", func(w *workerProc) <-chan struct{} { return w.ready }); err != nil {
		return r, fmt.Errorf("waiting for the workers to connect: %w", err)
	}
	if err := eachWorker(ctx, procs, "go", nil); err != nil {
		return r, err
	}
	if err := sleep(ctx, o.warmup); err != nil {
		return r, err
	}

	// The breakdown by statement is read outside the CPU window.
	var queriesBefore, queriesAfter map[string]int64
	if o.byQuery {
		if queriesBefore, err = m.byQuery(ctx, p); err != nil {
			return r, err
		}
	}
	primary := []int{p}
	before, err := m.read(ctx, primary, false)
	if err != nil {
		return r, err
	}
	if err := sleep(ctx, o.duration); err != nil {
		return r, err
	}
	after, err := m.read(ctx, primary, true)
	if err != nil {
		return r, err
	}
	if o.byQuery {
		if queriesAfter, err = m.byQuery(ctx, p); err != nil {
			return r, err
		}
	}
	conns, err := m.connections(ctx)
	if err != nil {
		return r, err
	}
	for _, w := range procs {
		if w.exited() {
			return r, fmt.Errorf("worker %d exited during the window", w.index)
		}
	}

	if err := eachWorker(ctx, procs, "idle", func(w *workerProc) <-chan struct{} { return w.idle }); err != nil {
		return r, fmt.Errorf("waiting for the workers to stop: %w", err)
	}
	if err := sleep(ctx, time.Second); err != nil { // in-flight work settles
		return r, err
	}
	all := make([]int, cl.Len())
	for i := range all {
		all[i] = i
	}
	idleBefore, err := m.read(ctx, all, false)
	if err != nil {
		return r, err
	}
	if err := sleep(ctx, o.idle); err != nil {
		return r, err
	}
	idleAfter, err := m.read(ctx, all, true)
	if err != nil {
		return r, err
	}
	idleConns, err := m.connections(ctx)
	if err != nil {
		return r, err
	}
	r = newResult(side, n, o, p, cl.Port(p), sink, before, after, idleBefore, idleAfter)
	r.conns, r.idleConns = conns, idleConns
	if o.byQuery {
		logQueries(queriesBefore, queriesAfter, r.writes)
	}
	return r, nil
}

// logQueries prints on stderr the calls per write of each statement the
// primary ran between two readings of meter.byQuery, most first.
func logQueries(before, after map[string]int64, writes int) {
	type row struct {
		query string
		calls int64
	}
	var rows []row
	for q, n := range after {
		if d := n - before[q]; d > 0 {
			rows = append(rows, row{strings.Join(strings.Fields(q), " "), d})
		}
	}
	slices.SortFunc(rows, func(a, b row) int { return int(b.calls - a.calls) })
	for _, r := range rows {
		fmt.Fprintf(os.Stderr, "    %7.3f/write %7d  %.100s\n", float64(r.calls)/float64(max(writes, 1)), r.calls, r.query)
	}
}

// eachWorker sends cmd (if not empty) to every worker, then waits until
// ack (if not nil) reports for every worker.
func eachWorker(ctx context.Context, procs []*workerProc, cmd string, ack func(*workerProc) <-chan struct{}) error {
	if cmd != "" {
		for _, w := range procs {
			if err := w.send(cmd); err != nil {
				return err
			}
		}
	}
	if ack == nil {
		return nil
	}
	for _, w := range procs {
		select {
		case <-ack(w):
		case <-w.done:
			return fmt.Errorf("worker %d exited", w.index)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// serverBinDir returns dir, else $PGREPLICA_PG_BIN, else the newest
// /usr/lib/postgresql/<major>/bin holding a postgres binary, else "" (the
// harness chooses, and statements are not counted).
func serverBinDir(dir string) string {
	if dir != "" {
		return dir
	}
	if d := os.Getenv("PGREPLICA_PG_BIN"); d != "" {
		return d
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	major := func(d string) int { n, _ := strconv.Atoi(filepath.Base(filepath.Dir(d))); return n }
	slices.SortFunc(found, func(a, b string) int { return major(b) - major(a) })
	for _, d := range found {
		if exists(filepath.Join(d, "postgres")) {
			return d
		}
	}
	return ""
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
