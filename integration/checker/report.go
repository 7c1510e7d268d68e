package checker

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pgreplica/pgreplica"
)

// Report is the outcome of one Run.
type Report struct {
	Target Target
	Driver string // pgreplica's inner driver ("" for the naive router)
	// Shape is the Deployment's shape the run went through (ShapeDirect
	// on a plain Cluster).
	Shape    Shape
	Sessions int
	Seed     uint64
	// Elapsed is how long the sessions ran.
	Elapsed time.Duration
	// History is every operation; Violations what Check and
	// CheckWatermarks found in it, in time order.
	History    History
	Violations []Violation
	// Writes and Reads count operations that succeeded. KillErrors counts
	// reads that failed because a replica was killed (a lost or refused
	// connection while it was down or had just come back, see Restart),
	// which are tolerated; ProxyErrors counts the operations that failed
	// with a lost or refused connection because a proxy of a Deployment
	// was restarted (see ProxyRestart), tolerated too; Errors counts every
	// other failed operation.
	Writes, Reads, Errors, KillErrors, ProxyErrors int
	// ReadsByNode counts successful reads by the node that served them
	// (from inet_server_port()); Primary is the primary's index.
	ReadsByNode map[int]int
	Primary     int
	// Stats are the pgreplica connector's counters for the run (nil for
	// the naive router).
	Stats  *pgreplica.Stats
	Faults FaultStats
}

// newReport summarises a history and what the injector did meanwhile.
func newReport(o *Options, cl Cluster, h History, elapsed time.Duration, faults FaultStats) *Report {
	r := &Report{Target: o.Target, Shape: shapeOf(cl), Sessions: o.Sessions, Seed: o.Seed, Elapsed: elapsed,
		History: h, Violations: Check(h), ReadsByNode: map[int]int{}, Primary: cl.Primary(), Faults: faults}
	if o.Target.Pgreplica() {
		r.Driver = o.Driver
	}
	if uncovered := CheckWatermarks(h); len(uncovered) > 0 {
		r.Violations = append(r.Violations, uncovered...)
		slices.SortStableFunc(r.Violations, func(a, b Violation) int { return a.at().Compare(b.at()) })
	}
	for i := range h.Ops {
		op := &h.Ops[i]
		switch {
		case killError(op, faults.Restarts):
			r.KillErrors++
		case proxyError(op, faults.ProxyRestarts):
			r.ProxyErrors++
		case op.Err != nil:
			r.Errors++
		case op.Kind == OpWrite:
			r.Writes++
		default:
			r.Reads++
			r.ReadsByNode[op.Node]++
		}
	}
	return r
}

// Count returns the number of violations of kind k.
func (r *Report) Count(k Kind) int {
	n := 0
	for i := range r.Violations {
		if r.Violations[i].Kind == k {
			n++
		}
	}
	return n
}

// MonotonicCount returns the number of monotonic-read violations on the
// session's own rows (own) or on other sessions' rows.
func (r *Report) MonotonicCount(own bool) int {
	n := 0
	for i := range r.Violations {
		if v := &r.Violations[i]; v.Kind == MonotonicRead && v.Read.Own() == own {
			n++
		}
	}
	return n
}

// RestartRegressions returns the number of monotonic-read violations in
// which one replica served both reads and was killed and restarted in
// between: the replica itself went back in time, which only a restart
// can make it do (replay never goes back within one run of a server).
// The naive router must show some when the injector kills replicas; a
// router that takes the restarted replica for its old self would too.
func (r *Report) RestartRegressions() int {
	n := 0
	for i := range r.Violations {
		if v := &r.Violations[i]; v.Kind == MonotonicRead && v.Read.Node == v.Cause.Node && r.restartBetween(&v.Cause, &v.Read) != nil {
			n++
		}
	}
	return n
}

// restartBetween returns the first restart of the node that served later,
// a successful read, that began after earlier started, or nil.
func (r *Report) restartBetween(earlier, later *Op) *Restart {
	for i := range r.Faults.Restarts {
		if k := &r.Faults.Restarts[i]; k.Node == later.Node && later.Node != r.Primary &&
			earlier.Start.Before(k.Killed) && later.End.After(k.Killed) {
			return k
		}
	}
	return nil
}

// RestartReads counts the successful reads that replica k.Node served in
// the last second before it was killed (before), and those it served after
// it came back while it had replayed less than at the kill (behind): what
// the restart put to the test.
func (r *Report) RestartReads(k *Restart) (before, behind int) {
	for i := range r.History.Ops {
		op := &r.History.Ops[i]
		if op.Kind != OpRead || op.Err != nil || op.Node != k.Node {
			continue
		}
		switch {
		case op.End.Before(k.Killed) && op.End.After(k.Killed.Add(-time.Second)):
			before++
		case op.Start.After(k.Killed) && op.ReplayLSN < k.ReplayAtKill:
			behind++
		}
	}
	return before, behind
}

// RestartsBehind returns the number of restarts that came back behind what
// the replica had replayed before the kill (see Restart.Behind).
func (r *Report) RestartsBehind() int {
	n := 0
	for i := range r.Faults.Restarts {
		if r.Faults.Restarts[i].Behind() {
			n++
		}
	}
	return n
}

// ReplicaShare is the fraction of successful reads a replica served.
func (r *Report) ReplicaShare() float64 {
	if r.Reads == 0 {
		return 0
	}
	return float64(r.Reads-r.ReadsByNode[r.Primary]) / float64(r.Reads)
}

// tolerated reports whether op failed because of a kill or a proxy
// restart (KillErrors, ProxyErrors).
func (r *Report) tolerated(op *Op) bool {
	return killError(op, r.Faults.Restarts) || proxyError(op, r.Faults.ProxyRestarts)
}

// Errs returns the errors of failed operations, at most max of them,
// leaving out the tolerated ones (KillErrors, ProxyErrors).
func (r *Report) Errs(max int) []error {
	return r.errs(max, false)
}

// KillErrs returns the errors of the tolerated failed operations
// (KillErrors, ProxyErrors), at most max of them.
func (r *Report) KillErrs(max int) []error {
	return r.errs(max, true)
}

func (r *Report) errs(max int, tolerated bool) []error {
	var out []error
	for i := range r.History.Ops {
		op := &r.History.Ops[i]
		if op.Err != nil && r.tolerated(op) == tolerated && len(out) < max {
			out = append(out, op.Err)
		}
	}
	return out
}

// WriteTable writes one line per report: operations, violations by kind,
// where reads ran, and pgreplica's wait times and fallbacks. Wait
// quantiles are the upper bounds of the driver's histogram buckets.
func WriteTable(w io.Writer, reports ...*Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\tdriver\tsecs\tops\tops/s\terrors\tRYW\tmono own\tmono other\timpossible\treplica reads\treads by node\twaits\twait p50\twait p95\tfallback timeout\tfallback no_replica\tuncovered writes\tdelays/pauses\trestarts (behind)\tkill errors\trestart regressions\t")
	for _, r := range reports {
		ops := r.Writes + r.Reads + r.Errors + r.KillErrors
		secs := r.Elapsed.Seconds()
		waits, p50, p95, fbTimeout, fbNone, driver, uncovered := "-", "-", "-", "-", "-", "-", "-"
		if r.Driver != "" {
			driver = r.Driver
		}
		if r.Target == TargetSession || r.Target == TargetPgx {
			// The only targets whose writes carry the session.
			uncovered = fmt.Sprint(r.Count(UncoveredWrite))
		}
		if s := r.Stats; s != nil {
			waits = fmt.Sprint(s.Wait.Count)
			p50, p95 = fmt.Sprint(s.Wait.P50), fmt.Sprint(s.Wait.P95)
			fbTimeout = fmt.Sprint(s.Fallbacks[pgreplica.ReasonTimeout])
			fbNone = fmt.Sprint(s.Fallbacks[pgreplica.ReasonNoReplica])
		}
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%d\t%.0f\t%d\t%d\t%d\t%d\t%d\t%.1f%%\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d/%d\t%d (%d)\t%d\t%d\t\n",
			r.Target, driver, secs, ops, float64(ops)/max(secs, 1e-9), r.Errors,
			r.Count(ReadYourWrites), r.MonotonicCount(true), r.MonotonicCount(false), r.Count(Impossible),
			100*r.ReplicaShare(), r.nodeShares(), waits, p50, p95, fbTimeout, fbNone, uncovered,
			r.Faults.DelayChanges, r.Faults.Pauses, len(r.Faults.Restarts), r.RestartsBehind(), r.KillErrors, r.RestartRegressions())
	}
	return tw.Flush()
}

// nodeShares renders ReadsByNode as "n0:5% n1:48% n2:47%".
func (r *Report) nodeShares() string {
	nodes := make([]int, 0, len(r.ReadsByNode))
	for n := range r.ReadsByNode {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	parts := make([]string, 0, len(nodes))
	for _, n := range nodes {
		parts = append(parts, fmt.Sprintf("n%d:%.0f%%", n, 100*float64(r.ReadsByNode[n])/float64(max(r.Reads, 1))))
	}
	return strings.Join(parts, " ")
}

// WriteDetails writes the run's seed, the restarts, the first max
// violations with the fault events just before each, the first max errors
// and a few tolerated ones.
func (r *Report) WriteDetails(w io.Writer, max int) {
	name := string(r.Target)
	if r.Driver != "" {
		name += "/" + r.Driver
	}
	if r.Shape != "" && r.Shape != ShapeDirect {
		name += " through " + string(r.Shape)
	}
	fmt.Fprintf(w, "%s (%d sessions, seed %d): %d violations, %d errors, %d reads failed as replicas were killed (tolerated)",
		name, r.Sessions, r.Seed, len(r.Violations), r.Errors, r.KillErrors)
	if len(r.Faults.ProxyRestarts) > 0 {
		fmt.Fprintf(w, ", %d operations failed as proxies restarted (tolerated; the last %v after the proxy was back)",
			r.ProxyErrors, r.ProxyOutage().Round(time.Millisecond))
	}
	fmt.Fprintln(w)
	for _, p := range r.Faults.ProxyRestarts {
		if p.Up.IsZero() {
			fmt.Fprintf(w, "  proxy %s restart at %s failed\n", p.Proxy, p.At.Format("15:04:05.000000"))
			continue
		}
		fmt.Fprintf(w, "  proxy %s restarted at %s, %v down\n", p.Proxy, p.At.Format("15:04:05.000000"), p.Downtime.Round(time.Millisecond))
	}
	for i := range r.Faults.Restarts {
		k := &r.Faults.Restarts[i]
		before, behind := r.RestartReads(k)
		lull := ""
		if k.Lull {
			lull = " in a lull"
		}
		fmt.Fprintf(w, "  node %d killed%s at %s, replayed %s (minimum recovery point %s); %s; it served %d reads in the second before the kill and %d while behind\n",
			k.Node, lull, k.Killed.Format("15:04:05.000000"), k.ReplayAtKill, k.MinRecovery, k, before, behind)
	}
	for i, v := range r.Violations {
		if i == max {
			fmt.Fprintf(w, "  … %d more violations\n", len(r.Violations)-max)
			break
		}
		fmt.Fprintf(w, "  %s\n", v)
		if r.Stats != nil {
			fmt.Fprintf(w, "    why: %s\n", v.Explain(r.Primary))
		}
		from, to := v.Cause.Start, v.Read.End
		if v.Kind == UncoveredWrite {
			from, to = v.Wrote.Start, v.Wrote.End
		}
		if ev := r.faultsBefore(from, to); ev != "" {
			fmt.Fprintf(w, "    faults: %s\n", ev)
		}
		if k := r.restartBetween(&v.Cause, &v.Read); v.Kind != UncoveredWrite && k != nil {
			fmt.Fprintf(w, "    restart: node %d served the read after it was killed at %s (replayed %s) and came back at %s with replay %s\n",
				k.Node, k.Killed.Format("15:04:05.000000"), k.ReplayAtKill, k.Started.Format("15:04:05.000000"), k.ReplayAtStart)
		}
	}
	for _, err := range r.Errs(max) {
		fmt.Fprintf(w, "  error: %v\n", err)
	}
	for _, err := range r.KillErrs(min(max, 3)) {
		fmt.Fprintf(w, "  tolerated: %v\n", err)
	}
}

// faultsBefore describes the fault state of each node at from (its last
// delay and its last pause or resume) and the events between from and to.
func (r *Report) faultsBefore(from, to time.Time) string {
	type state struct{ delay, replay, life *FaultEvent }
	states := map[int]*state{}
	var during []string
	for i := range r.Faults.Events {
		e := &r.Faults.Events[i]
		if !from.IsZero() && !e.At.Before(from) {
			if e.At.Before(to) {
				during = append(during, fmt.Sprintf("%s node %d %s", e.At.Format("15:04:05.000000"), e.Node, e.What))
			}
			continue
		}
		s := states[e.Node]
		if s == nil {
			s = &state{}
			states[e.Node] = s
		}
		switch {
		case strings.HasPrefix(e.What, "delay"):
			s.delay = e
		case strings.HasPrefix(e.What, "kill"), strings.HasPrefix(e.What, "restart"):
			s.life = e
		default:
			s.replay = e
		}
	}
	nodes := make([]int, 0, len(states))
	for n := range states {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	var parts []string
	for _, n := range nodes {
		for _, e := range []*FaultEvent{states[n].delay, states[n].replay, states[n].life} {
			if e != nil {
				parts = append(parts, fmt.Sprintf("node %d %s since %s", n, e.What, e.At.Format("15:04:05.000000")))
			}
		}
	}
	if len(during) > 0 {
		parts = append(parts, "then "+strings.Join(during, ", "))
	}
	return strings.Join(parts, "; ")
}
