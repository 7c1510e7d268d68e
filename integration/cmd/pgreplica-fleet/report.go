package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pgreplica/pgreplica/integration"
)

// samples collects the workers' messages of one run.
type samples struct {
	mu     sync.Mutex
	writes []message
	reads  []message
	errs   []message
}

func (s *samples) add(m message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch m.Kind {
	case "w":
		s.writes = append(s.writes, m)
	case "r":
		s.reads = append(s.reads, m)
	case "err":
		s.errs = append(s.errs, m)
	}
}

// result is what one run measured. A value is negative when unknown.
type result struct {
	side      string
	procs     int
	window    time.Duration
	target    float64 // writes a second asked of the fleet
	writes    int     // completed in the window
	reads     int
	onReplica int // reads a replica served
	// checks and flights are the replay checks pgreplica's reads sent
	// before they ran, and in their own flight.
	checks, flights int64
	// recent and fallbacks are pgreplica's reads sent to the primary for
	// their process's recent write, and those that fell back.
	recent, fallbacks, hedges int64
	replicaLat                []time.Duration // sorted: the reads a replica served
	lags                      []time.Duration // sorted: the replicas' time lag the monitor knew after each read
	errors                    int             // failed operations in the window
	stmts                     int64
	cpu                       time.Duration
	writeLat                  []time.Duration // sorted
	readLat                   []time.Duration // sorted
	conns                     []int           // client connections of each node, end of the window
	idleConns                 []int           // the same, end of the idle window
	idleStmts                 []float64       // statements a second, each node
	idleCPU                   []float64       // CPU ms a second, each node
}

// newResult counts the operations that ended in the window between
// before and after, and divides the primary's work over that window by
// the writes, and the idle window's by its length.
func newResult(side string, procs int, o options, primary, primaryPort int, s *samples, before, after, idleBefore, idleAfter reading) result {
	r := result{
		side: side, procs: procs, window: after.at.Sub(before.at),
		target: float64(procs) * o.writeRate, stmts: -1, cpu: -1,
	}
	from, to := before.at.UnixNano(), after.at.UnixNano()
	in := func(m message) bool { return m.End >= from && m.End <= to }
	s.mu.Lock()
	for _, m := range s.writes {
		if in(m) {
			r.writes++
			r.writeLat = append(r.writeLat, time.Duration(m.Lat))
		}
	}
	for _, m := range s.reads {
		if in(m) {
			r.reads++
			r.readLat = append(r.readLat, time.Duration(m.Lat))
			if m.Port != primaryPort {
				r.onReplica++
				r.replicaLat = append(r.replicaLat, time.Duration(m.Lat))
			}
			r.checks += m.Checks
			r.flights += m.Flight
			r.recent += m.Recent
			r.hedges += m.Hedges
			r.lags = append(r.lags, time.Duration(m.Lag))
			r.fallbacks += m.Fallback
		}
	}
	for _, m := range s.errs {
		if in(m) {
			r.errors++
		}
	}
	s.mu.Unlock()
	slices.Sort(r.writeLat)
	slices.Sort(r.readLat)
	slices.Sort(r.replicaLat)
	slices.Sort(r.lags)
	if a, b := after.stmts[primary], before.stmts[primary]; a >= 0 && b >= 0 {
		r.stmts = a - b
	}
	if a, b := after.cpu[primary], before.cpu[primary]; a >= 0 && b >= 0 {
		r.cpu = a - b
	}
	secs := idleAfter.at.Sub(idleBefore.at).Seconds()
	for i := range idleAfter.stmts {
		st, c := -1.0, -1.0
		if a, b := idleAfter.stmts[i], idleBefore.stmts[i]; a >= 0 && b >= 0 {
			st = float64(a-b) / secs
		}
		if a, b := idleAfter.cpu[i], idleBefore.cpu[i]; a >= 0 && b >= 0 {
			c = float64(a-b) / float64(time.Millisecond) / secs
		}
		r.idleStmts = append(r.idleStmts, st)
		r.idleCPU = append(r.idleCPU, c)
	}
	return r
}

// stmtsPerWrite is the primary's statements per write, or -1.
func (r result) stmtsPerWrite() float64 {
	if r.stmts < 0 || r.writes == 0 {
		return -1
	}
	return float64(r.stmts) / float64(r.writes)
}

// cpuPerWrite is the primary's CPU µs per write, or -1.
func (r result) cpuPerWrite() float64 {
	if r.cpu < 0 || r.writes == 0 {
		return -1
	}
	return float64(r.cpu) / float64(time.Microsecond) / float64(r.writes)
}

func (r result) writesPerSec() float64 { return float64(r.writes) / r.window.Seconds() }

func (r result) replicaShare() float64 {
	if r.reads == 0 {
		return -1
	}
	return float64(r.onReplica) / float64(r.reads)
}

// summary is the run's progress line.
func (r result) summary() string {
	return fmt.Sprintf("%d writes, %s stmts/write, %s µs CPU/write, %d reads (%s on replicas; %s), %d errors",
		r.writes, num(r.stmtsPerWrite(), 3), num(r.cpuPerWrite(), 0), r.reads, pct(r.replicaShare()), r.checkShares(), r.errors)
}

// checkShares says how many of the replica reads sent a replay check
// before they ran (a round trip each) and how many carried it in their
// own flight.
func (r result) checkShares() string {
	if r.onReplica == 0 {
		return "checks n/a"
	}
	n := float64(r.onReplica)
	return fmt.Sprintf("checks before %s, in flight %s of replica reads; on the primary for a recent write %d, fallen back %d; hedged %d; replica reads p99 %s ms; replicas' time lag p50 / p99 %s / %s ms",
		pct(float64(r.checks)/n), pct(float64(r.flights)/n), r.recent, r.fallbacks, r.hedges, ms(pctl(r.replicaLat, 0.99)), ms(pctl(r.lags, 0.5)), ms(pctl(r.lags, 0.99)))
}

// header describes the conditions of the runs.
type header struct {
	o          options
	server     string
	cpus       int
	loadBefore string
	loadAfter  string
}

func newHeader(ctx context.Context, cl *integration.Cluster, o options) header {
	v, err := cl.QueryString(ctx, cl.Primary(), "SHOW server_version")
	if err != nil {
		v = "?"
	}
	return header{o: o, server: v, cpus: runtime.NumCPU(), loadBefore: loadAverage()}
}

// loadAverage returns the 1-minute load average, or "?".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

// printReport writes the markdown table of every run, then the ratios.
func printReport(w io.Writer, h header, results []result) {
	o := h.o
	if h.loadAfter == "" {
		h.loadAfter = loadAverage()
	}
	fmt.Fprintf(w, "\nEach process: %g autocommit INSERTs/s and %g reads/s (the row it wrote last, process default);"+
		" window %v after a %v warm-up; idle window %v. PostgreSQL %s, primary + 2 replicas on 127.0.0.1, fsync off;"+
		" %d CPUs; load average %s before, %s after.\n\n",
		o.writeRate, o.readRate, o.duration, o.warmup, o.idle, h.server, h.cpus, h.loadBefore, h.loadAfter)
	fmt.Fprintln(w, "| P | side | writes/s (target) | primary stmts/write | primary CPU µs/write | write p50 / p99 ms | read p50 / p99 ms | reads on replicas | replica reads checked before / in flight | errors | conns primary / r1 / r2 | idle conns | idle stmts/s primary / r1 / r2 | idle CPU ms/s primary / r1 / r2 |")
	fmt.Fprintln(w, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range results {
		checks := "–"
		if r.side == sidePgreplica && r.onReplica > 0 {
			checks = pct(float64(r.checks)/float64(r.onReplica)) + " / " + pct(float64(r.flights)/float64(r.onReplica))
		}
		fmt.Fprintf(w, "| %d | %s | %.0f (%.0f) | %s | %s | %s / %s | %s / %s | %s | %s | %d | %s | %s | %s | %s |\n",
			r.procs, r.side, r.writesPerSec(), r.target, num(r.stmtsPerWrite(), 3), num(r.cpuPerWrite(), 0),
			ms(pctl(r.writeLat, 0.50)), ms(pctl(r.writeLat, 0.99)), ms(pctl(r.readLat, 0.50)), ms(pctl(r.readLat, 0.99)),
			pct(r.replicaShare()), checks, r.errors, ints(r.conns), ints(r.idleConns), nums(r.idleStmts, 1), nums(r.idleCPU, 1))
	}
	fmt.Fprintln(w, "\npgreplica / pgx, what the primary pays per write:")
	fmt.Fprintln(w, "\n| P | statements per write | CPU per write |")
	fmt.Fprintln(w, "|---:|---:|---:|")
	for _, n := range o.procs {
		var pgx, pgr *result
		for i := range results {
			switch r := &results[i]; {
			case r.procs == n && r.side == sidePgx:
				pgx = r
			case r.procs == n && r.side == sidePgreplica:
				pgr = r
			}
		}
		if pgx == nil || pgr == nil {
			continue
		}
		fmt.Fprintf(w, "| %d | %s | %s |\n", n,
			ratio(pgr.stmtsPerWrite(), pgx.stmtsPerWrite()), ratio(pgr.cpuPerWrite(), pgx.cpuPerWrite()))
	}
}

// pctl returns the q-quantile of sorted (nearest rank), or -1.
func pctl(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return -1
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) string {
	if d < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond))
}

func num(v float64, prec int) string {
	if v < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.*f", prec, v)
}

func nums(vs []float64, prec int) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = num(v, prec)
	}
	return strings.Join(s, " / ")
}

func ints(vs []int) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = fmt.Sprint(v)
	}
	return strings.Join(s, " / ")
}

func pct(v float64) string {
	if v < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.0f %%", 100*v)
}

func ratio(a, b float64) string {
	if a < 0 || b <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", a/b)
}
