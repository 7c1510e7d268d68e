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
	Target   Target
	Driver   string // pgreplica's inner driver ("" for the naive router)
	Sessions int
	Seed     uint64
	// Elapsed is how long the sessions ran.
	Elapsed time.Duration
	// History is every operation; Violations what Check and
	// CheckWatermarks found in it, in time order.
	History    History
	Violations []Violation
	// Writes and Reads count operations that succeeded, Errors those that
	// failed.
	Writes, Reads, Errors int
	// ReadsByNode counts successful reads by the node that served them
	// (from inet_server_port()); Primary is the primary's index.
	ReadsByNode map[int]int
	Primary     int
	// Stats are the pgreplica connector's counters for the run (nil for
	// the naive router).
	Stats  *pgreplica.Stats
	Faults FaultStats
}

// newReport summarises a history.
func newReport(o *Options, cl Cluster, h History, elapsed time.Duration) *Report {
	r := &Report{Target: o.Target, Sessions: o.Sessions, Seed: o.Seed, Elapsed: elapsed,
		History: h, Violations: Check(h), ReadsByNode: map[int]int{}, Primary: cl.Primary()}
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

// ReplicaShare is the fraction of successful reads a replica served.
func (r *Report) ReplicaShare() float64 {
	if r.Reads == 0 {
		return 0
	}
	return float64(r.Reads-r.ReadsByNode[r.Primary]) / float64(r.Reads)
}

// Errs returns the errors of failed operations, at most max of them.
func (r *Report) Errs(max int) []error {
	var out []error
	for i := range r.History.Ops {
		if err := r.History.Ops[i].Err; err != nil && len(out) < max {
			out = append(out, err)
		}
	}
	return out
}

// WriteTable writes one line per report: operations, violations by kind,
// where reads ran, and pgreplica's wait times and fallbacks. Wait
// quantiles are the upper bounds of the driver's histogram buckets.
func WriteTable(w io.Writer, reports ...*Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\tdriver\tsecs\tops\tops/s\terrors\tRYW\tmono own\tmono other\timpossible\treplica reads\treads by node\twaits\twait p50\twait p95\tfallback timeout\tfallback no_replica\tuncovered writes\tdelays/pauses\t")
	for _, r := range reports {
		ops := r.Writes + r.Reads + r.Errors
		secs := r.Elapsed.Seconds()
		waits, p50, p95, fbTimeout, fbNone, driver, uncovered := "-", "-", "-", "-", "-", "-", "-"
		if r.Driver != "" {
			driver = r.Driver
		}
		if r.Target == TargetSession {
			// The only target whose writes carry the session.
			uncovered = fmt.Sprint(r.Count(UncoveredWrite))
		}
		if s := r.Stats; s != nil {
			waits = fmt.Sprint(s.Wait.Count)
			p50, p95 = fmt.Sprint(s.Wait.P50), fmt.Sprint(s.Wait.P95)
			fbTimeout = fmt.Sprint(s.Fallbacks[pgreplica.ReasonTimeout])
			fbNone = fmt.Sprint(s.Fallbacks[pgreplica.ReasonNoReplica])
		}
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%d\t%.0f\t%d\t%d\t%d\t%d\t%d\t%.1f%%\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d/%d\t\n",
			r.Target, driver, secs, ops, float64(ops)/max(secs, 1e-9), r.Errors,
			r.Count(ReadYourWrites), r.MonotonicCount(true), r.MonotonicCount(false), r.Count(Impossible),
			100*r.ReplicaShare(), r.nodeShares(), waits, p50, p95, fbTimeout, fbNone, uncovered,
			r.Faults.DelayChanges, r.Faults.Pauses)
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

// WriteDetails writes the run's seed, the first max violations with the
// fault events just before each, and the first max errors.
func (r *Report) WriteDetails(w io.Writer, max int) {
	name := string(r.Target)
	if r.Driver != "" {
		name += "/" + r.Driver
	}
	fmt.Fprintf(w, "%s (%d sessions, seed %d): %d violations, %d errors\n",
		name, r.Sessions, r.Seed, len(r.Violations), r.Errors)
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
	}
	for _, err := range r.Errs(max) {
		fmt.Fprintf(w, "  error: %v\n", err)
	}
}

// faultsBefore describes the fault state of each node at from (its last
// delay and its last pause or resume) and the events between from and to.
func (r *Report) faultsBefore(from, to time.Time) string {
	type state struct{ delay, replay *FaultEvent }
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
		if strings.HasPrefix(e.What, "delay") {
			s.delay = e
		} else {
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
		for _, e := range []*FaultEvent{states[n].delay, states[n].replay} {
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
