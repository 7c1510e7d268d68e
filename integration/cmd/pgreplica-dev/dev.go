package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration"
	"github.com/pgreplica/pgreplica/internal/clitext"
	"github.com/pgreplica/pgreplica/internal/tuning"
)

type devOptions struct {
	replicas int
	lag      time.Duration
	port     int
	dir      string
	every    time.Duration
}

// maxDevReplicas keeps every replica one key away (1..9).
const maxDevReplicas = 9

// run runs a command line and returns the exit code: without a verb it
// serves a cluster until ctx ends (stdin may be nil: it then reads no
// keys), with one it sends that verb to the running dev.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("pgreplica-dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := devOptions{}
	fs.IntVar(&o.replicas, "replicas", 2, "number of streaming replicas (1 to 9)")
	fs.DurationVar(&o.lag, "lag", 200*time.Millisecond, "apply delay of every replica at start (recovery_min_apply_delay)")
	fs.IntVar(&o.port, "port", 0, "port of the primary; replica N gets port+N (0: free ports)")
	fs.StringVar(&o.dir, "dir", "", "keep the cluster's data in this directory (started again by the next dev on it);\n"+
		"without it the data lives in a temporary directory removed at the end")
	fs.DurationVar(&o.every, "every", 2*time.Second, "interval of the lag line (0: none)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage:

  pgreplica-dev [flags]                 start a primary and lagging replicas, until Ctrl-C
  pgreplica-dev [-dir D] lag N DURATION  set replica N's apply delay (0 removes it)
  pgreplica-dev [-dir D] pause N         pause WAL replay on replica N
  pgreplica-dev [-dir D] resume N        resume it
  pgreplica-dev [-dir D] status          the lag of each replica

pgreplica-dev starts a PostgreSQL primary and streaming replicas on 127.0.0.1
with the integration harness (the PostgreSQL server binaries installed here,
else a Docker engine), makes the replicas lag, prints the multi-host DSN for
your application and keeps running, showing each replica's lag, until Ctrl-C:
then it stops the servers and removes everything (with -dir the data stays).
Replicas are numbered from 1. The lag, pause and resume commands act on the
running dev from another terminal (the same -dir finds it); in the running
dev, type a replica's number, + or - (double or halve its lag), p (pause or
resume it) or q (quit), each followed by Enter.

Flags:
`)
		fs.PrintDefaults()
	}
	pos, err := clitext.ParseFlags(fs, args)
	if err != nil {
		return flagExit(err)
	}
	if len(pos) > 0 {
		return devControl(ctx, o.dir, pos, stdout, stderr)
	}
	if o.replicas < 1 || o.replicas > maxDevReplicas || o.lag < 0 || o.port < 0 || o.every < 0 {
		fmt.Fprintf(stderr, "pgreplica-dev: -replicas must be 1 to %d; -lag, -port and -every not negative\n", maxDevReplicas)
		return exitUsage
	}
	return devServe(ctx, o, stdin, stdout, stderr)
}

// devVerbs are the control commands, with their number of arguments.
var devVerbs = map[string]int{"lag": 2, "pause": 1, "resume": 1, "status": 0}

// devControl sends a control command to the dev running with dir.
func devControl(ctx context.Context, dir string, pos []string, stdout, stderr io.Writer) int {
	verb, args := pos[0], pos[1:]
	if n, ok := devVerbs[verb]; !ok || len(args) != n {
		fmt.Fprintf(stderr, "pgreplica-dev: unknown command %q; want lag N DURATION, pause N, resume N or status\n",
			strings.Join(pos, " "))
		return exitUsage
	}
	path, err := devStatePath(dir)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitFail
	}
	st, err := findDev(ctx, path)
	if err != nil {
		fmt.Fprintf(stderr, "pgreplica-dev: %v\nstart one with: %s\n", err, devHint(dir, ""))
		return exitFail
	}
	out, err := devRequest(ctx, st, verb, args)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitFail
	}
	fmt.Fprintln(stdout, out)
	return exitOK
}

// devHint spells a dev command line as the user would type it: through
// go run when this binary was built by go run.
func devHint(dir, rest string) string {
	s := "pgreplica-dev"
	if strings.Contains(filepath.ToSlash(os.Args[0]), "/go-build") {
		s = "go run ./integration/cmd/pgreplica-dev"
	}
	if dir != "" {
		s += " -dir " + dir
	}
	if rest != "" {
		s += " " + rest
	}
	return s
}

// devCluster is the running cluster of pgreplica-dev and the lag it was
// given.
type devCluster struct {
	cl   *integration.Cluster
	dir  string               // -dir, for hints
	conn *pgreplica.Connector // the driver on the cluster, for the lag line
	db   *sql.DB              // on conn

	mu      sync.Mutex      // serialises changes; guards the fields below
	delays  []time.Duration // apply delay by node index (0, the primary, unused)
	paused  []bool
	changed []time.Time // when dev last paused or resumed each node
}

func devServe(ctx context.Context, o devOptions, stdin io.Reader, stdout, stderr io.Writer) int {
	statePath, err := devStatePath(o.dir)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitFail
	}
	if st, err := findDev(ctx, statePath); err == nil {
		fmt.Fprintf(stderr, "pgreplica-dev: one is already running (pid %d, %s) with the state file %s;\n"+
			"stop it (Ctrl-C there), talk to it (%s), or start this one with another -dir\n",
			st.PID, st.DSN, statePath, devHint(o.dir, "status"))
		return exitFail
	}
	opts := integration.Options{Replicas: o.replicas, Port: o.port, Logf: func(format string, args ...any) {
		fmt.Fprintf(stdout, "  %s\n", strings.TrimPrefix(fmt.Sprintf(format, args...), "integration: "))
	}}
	if o.dir != "" {
		if opts.Dir, err = filepath.Abs(o.dir); err != nil {
			fmt.Fprintln(stderr, "pgreplica-dev:", err)
			return exitFail
		}
		opts.Keep = true
	}
	fmt.Fprintf(stdout, "Starting a PostgreSQL primary and %s on 127.0.0.1 ...\n", replicasText(o.replicas))
	cl, err := integration.Start(ctx, opts)
	if err != nil {
		switch {
		case errors.Is(err, integration.ErrNoPostgres):
			fmt.Fprintf(stderr, "\npgreplica-dev: cannot start a local cluster.\n%v\n", err)
		case ctx.Err() != nil:
			fmt.Fprintln(stderr, "\npgreplica-dev: interrupted; nothing is left running")
		default:
			fmt.Fprintln(stderr, "\npgreplica-dev:", err)
		}
		return exitFail
	}
	d := &devCluster{cl: cl, dir: o.dir, delays: make([]time.Duration, cl.Len()), paused: make([]bool, cl.Len()),
		changed: make([]time.Time, cl.Len())}
	err = d.serve(ctx, o, statePath, stdin, stdout)
	if cerr := d.close(); cerr != nil {
		err = errors.Join(err, cerr)
	} else if o.dir != "" {
		fmt.Fprintf(stdout, "Cluster stopped; its data stays in %s (%s starts it again).\n", cl.Dir(), devHint(o.dir, ""))
	} else if cl.Dir() != "" {
		fmt.Fprintf(stdout, "Cluster stopped and %s removed.\n", cl.Dir())
	} else {
		fmt.Fprintln(stdout, "Cluster stopped and its containers removed.")
	}
	if err != nil {
		fmt.Fprintln(stderr, "pgreplica-dev:", err)
		return exitFail
	}
	return exitOK
}

// serve sets the initial lag, publishes the control server, prints the
// DSN and runs until ctx ends or q is typed.
func (d *devCluster) serve(ctx context.Context, o devOptions, statePath string, stdin io.Reader, stdout io.Writer) error {
	for i := 1; i < d.cl.Len(); i++ {
		if err := d.setLag(ctx, i, o.lag); err != nil {
			return err
		}
	}
	var err error
	if d.conn, d.db, err = watch(d.cl.DSN()); err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = d.db.PingContext(pctx)
	cancel()
	if err != nil {
		return fmt.Errorf("connecting through pgreplica: %w", err)
	}
	cs, err := startControl(d.do)
	if err != nil {
		return err
	}
	defer cs.close()
	st := devState{PID: os.Getpid(), DSN: d.cl.DSN(), Dir: d.cl.Dir(), Control: cs.addr(), Token: cs.token}
	if err := writeDevState(statePath, st); err != nil {
		return err
	}
	defer os.Remove(statePath)
	d.banner(stdout, o)

	lines := make(chan string)
	if stdin != nil {
		go func() {
			sc := bufio.NewScanner(stdin)
			for sc.Scan() {
				select {
				case lines <- sc.Text():
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	var tick <-chan time.Time
	if o.every > 0 {
		t := time.NewTicker(o.every)
		defer t.Stop()
		tick = t.C
	}
	selected := 1
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(stdout, "\nStopping ...")
			return nil
		case <-tick:
			fmt.Fprintln(stdout, d.statusLine())
		case line := <-lines:
			quit, out, err := d.key(ctx, strings.TrimSpace(line), &selected)
			if err != nil {
				fmt.Fprintln(stdout, "  ", err)
			} else if out != "" {
				fmt.Fprintln(stdout, out)
			}
			if quit {
				fmt.Fprintln(stdout, "Stopping ...")
				return nil
			}
		}
	}
}

func (d *devCluster) banner(w io.Writer, o devOptions) {
	dsn := d.cl.DSN()
	fmt.Fprintf(w, "\nReady: 1 primary + %s, each applying WAL %s after the primary commits.\n",
		replicasText(d.cl.Len()-1), clitext.HumanDuration(o.lag))
	if d.cl.Dir() != "" {
		where := "removed at the end"
		if o.dir != "" {
			where = "kept at the end"
		}
		fmt.Fprintf(w, "Data and server logs: %s (%s).\n", d.cl.Dir(), where)
	}
	fmt.Fprintf(w, "\nDSN, every host, primary first (sql.Open(\"pgreplica\", dsn)):\n  %s\n", dsn)
	fmt.Fprintf(w, "For your shell:\n  export PGREPLICA_DSN='%s'\n", dsn)
	fmt.Fprintf(w, "Each server alone (psql, or a naive router):\n")
	for i := range d.cl.Len() {
		role := "primary  "
		if i > 0 {
			role = fmt.Sprintf("replica %d", i)
		}
		fmt.Fprintf(w, "  %s  %s\n", role, d.cl.NodeDSN(i))
	}
	last := strconv.Itoa(d.cl.Len() - 1)
	fmt.Fprintf(w, "\nChange the lag from another terminal:\n  %s\n  %s\n  %s\n  %s\n",
		devHint(d.dir, "lag 1 500ms"), devHint(d.dir, "pause "+last), devHint(d.dir, "resume "+last), devHint(d.dir, "status"))
	fmt.Fprintf(w, "or here (each followed by Enter): %s\n", keyHelp)
	if d.dir != "" {
		fmt.Fprintln(w, "Ctrl-C stops the servers and keeps their data.")
	} else {
		fmt.Fprintln(w, "Ctrl-C stops the servers and removes everything.")
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, d.statusLine())
}

func replicasText(n int) string {
	if n == 1 {
		return "1 streaming replica"
	}
	return strconv.Itoa(n) + " streaming replicas"
}

const keyHelp = "a replica's number selects it, + / - doubles / halves its lag, p pauses or resumes its replay, " +
	"lag N DURATION, pause N, resume N, Enter alone shows the lag, q quits"

// key runs one line typed in the running dev.
func (d *devCluster) key(ctx context.Context, line string, selected *int) (quit bool, out string, err error) {
	if n, err := strconv.Atoi(line); err == nil {
		if n < 1 || n >= d.cl.Len() {
			return false, "", fmt.Errorf("no replica %d: they are 1 to %d", n, d.cl.Len()-1)
		}
		*selected = n
		return false, fmt.Sprintf("replica %d selected: + / - changes its lag, p pauses or resumes it", n), nil
	}
	d.mu.Lock()
	delay, paused := d.delays[*selected], d.paused[*selected]
	d.mu.Unlock()
	sel := strconv.Itoa(*selected)
	switch line {
	case "":
		return false, d.statusLine(), nil
	case "q", "quit", "exit":
		return true, "", nil
	case "?", "h", "help":
		return false, keyHelp, nil
	case "+":
		next := 2 * delay
		if next == 0 {
			next = 100 * time.Millisecond
		}
		out, err = d.do(ctx, "lag", []string{sel, next.String()})
	case "-":
		next := delay / 2
		if next < 50*time.Millisecond {
			next = 0
		}
		out, err = d.do(ctx, "lag", []string{sel, next.String()})
	case "p":
		verb := "pause"
		if paused {
			verb = "resume"
		}
		out, err = d.do(ctx, verb, []string{sel})
	default:
		f := strings.Fields(line)
		if n, ok := devVerbs[f[0]]; !ok || len(f)-1 != n {
			return false, "", fmt.Errorf("%q? %s", line, keyHelp)
		}
		out, err = d.do(ctx, f[0], f[1:])
	}
	return false, out, err
}

// do runs a control verb, from the control server or a typed line, and
// returns the status line after it.
func (d *devCluster) do(ctx context.Context, verb string, args []string) (string, error) {
	if n, ok := devVerbs[verb]; !ok || len(args) != n {
		return "", fmt.Errorf("unknown command %q; want lag N DURATION, pause N, resume N or status",
			strings.TrimSpace(verb+" "+strings.Join(args, " ")))
	}
	if verb == "status" {
		return d.statusLine(), nil
	}
	i, err := strconv.Atoi(args[0])
	if err != nil || i < 1 || i >= d.cl.Len() {
		return "", fmt.Errorf("no replica %q: they are 1 to %d", args[0], d.cl.Len()-1)
	}
	var what string
	switch verb {
	case "lag":
		lag, perr := time.ParseDuration(args[1])
		if perr != nil || lag < 0 {
			return "", fmt.Errorf("lag %q: want a duration such as 500ms, 2s or 0", args[1])
		}
		err = d.setLag(ctx, i, lag)
		what = fmt.Sprintf("replica %d now applies WAL %s after the primary commits", i, clitext.HumanDuration(lag))
	case "pause":
		err = d.setPaused(ctx, i, true)
		what = fmt.Sprintf("replica %d: replay paused (it receives WAL but shows nothing new)", i)
	case "resume":
		err = d.setPaused(ctx, i, false)
		what = fmt.Sprintf("replica %d: replay resumed", i)
	}
	if err != nil {
		return "", err
	}
	return what + "\n" + d.statusLine(), nil
}

func (d *devCluster) setLag(ctx context.Context, i int, lag time.Duration) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.cl.SetApplyDelay(ctx, i, lag); err != nil {
		return fmt.Errorf("setting the lag of replica %d: %w", i, err)
	}
	d.delays[i] = lag
	return nil
}

func (d *devCluster) setPaused(ctx context.Context, i int, pause bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var err error
	if pause {
		err = d.cl.PauseReplay(ctx, i)
	} else {
		err = d.cl.ResumeReplay(ctx, i)
	}
	if err != nil {
		return fmt.Errorf("replica %d: %w", i, err)
	}
	d.paused[i], d.changed[i] = pause, time.Now()
	return nil
}

// statusLine is one line with each replica's lag as the pgreplica driver
// measures it (bytes and time behind the primary), its apply delay, and
// whether pgreplica sends reads there.
func (d *devCluster) statusLine() string {
	byAddr := map[string]pgreplica.NodeStatus{}
	if d.conn != nil {
		for _, ns := range d.conn.Nodes() {
			byAddr[ns.Addr] = ns
		}
	}
	d.mu.Lock()
	delays, paused := append([]time.Duration(nil), d.delays...), append([]bool(nil), d.paused...)
	changed := append([]time.Time(nil), d.changed...)
	d.mu.Unlock()
	var parts []string
	for i := 1; i < d.cl.Len(); i++ {
		s := fmt.Sprintf("replica %d: delay %s", i, clitext.HumanDuration(delays[i]))
		ns, ok := byAddr[fmt.Sprintf("127.0.0.1:%d", d.cl.Port(i))]
		// What dev did, or what the driver saw since (replay paused
		// by hand): a probe from before the last change is out of date.
		if ns.Sampled.After(changed[i]) {
			paused[i] = ns.ReplayPaused
		}
		if paused[i] {
			s += ", PAUSED"
		}
		switch {
		case !ok || ns.Sampled.IsZero():
			s += ", not probed yet"
		case ns.Err != nil:
			s += ", " + clitext.ErrState(ns.Err)
		default:
			s += fmt.Sprintf(", behind %s / %s", clitext.HumanBytes(ns.LagBytes), clitext.HumanDuration(ns.LagTime))
		}
		parts = append(parts, s)
	}
	return time.Now().Format("15:04:05") + "  " + strings.Join(parts, "  |  ")
}

// close closes the driver and stops the cluster.
func (d *devCluster) close() error {
	if d.db != nil {
		d.db.Close() // closes the connector
	}
	return d.cl.Close()
}

// watchInterval is the driver's topology poll interval for the lag line:
// faster than its default, so that a change shows in the next line.
const watchInterval = 100 * time.Millisecond

// watch opens the driver on dsn as an application does, so that the lag
// line shows what pgreplica measures. It polls every watchInterval, idle
// or not: dev runs no statement of its own, and an idle connector's view
// would be four times as old.
func watch(dsn string) (*pgreplica.Connector, *sql.DB, error) {
	cfg, err := pgreplica.ParseDSN(dsn)
	if err != nil {
		return nil, nil, err
	}
	tuning.Set(&cfg, tuning.Knobs{MonitorInterval: watchInterval, IdleMonitorInterval: watchInterval})
	c, err := pgreplica.NewConnector(cfg)
	if err != nil {
		return nil, nil, err
	}
	return c, sql.OpenDB(c), nil
}
