package checker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// MatrixRun is one run of RunMatrix: a target through a shape.
type MatrixRun struct {
	Shape   Shape
	Options Options
	// Report is nil when the run could not start (or the shape could not
	// be deployed); Err says why, or what went wrong during the run.
	Report *Report
	Err    error
}

// Name is the run's target, with pgreplica's inner driver when it is not
// pgx.
func (m *MatrixRun) Name() string {
	name := string(m.Options.Target)
	if m.Options.Driver != "" && m.Options.Driver != "pgx" {
		name += "/" + m.Options.Driver
	}
	return name
}

// RunMatrix deploys each shape in turn in front of cl (Deploy), runs every
// one of runs through it (Run), and closes the deployment before the next
// shape. done, if not nil, is called after each run. It stops early only
// when ctx ends; a shape that cannot be deployed fails each of its runs
// (MatrixRun.Err).
func RunMatrix(ctx context.Context, cl Cluster, shapes []Shape, runs []Options, done func(MatrixRun)) []MatrixRun {
	var out []MatrixRun
	add := func(m MatrixRun) {
		out = append(out, m)
		if done != nil {
			done(m)
		}
	}
	for _, s := range shapes {
		if ctx.Err() != nil {
			break
		}
		d, err := Deploy(ctx, cl, s)
		if err != nil {
			for _, o := range runs {
				add(MatrixRun{Shape: s, Options: o, Err: err})
			}
			continue
		}
		for _, o := range runs {
			if ctx.Err() != nil {
				break
			}
			rep, err := Run(ctx, d, o)
			add(MatrixRun{Shape: s, Options: o, Report: rep, Err: err})
		}
		if err := d.Close(); err != nil && len(out) > 0 {
			out[len(out)-1].Err = errors.Join(out[len(out)-1].Err, err)
		}
	}
	return out
}

// WriteMatrix writes one line per run: the shape, the target, operations,
// errors (tolerated ones apart, with how long operations kept failing
// after a restarted proxy was back: ProxyOutage), the violations by kind,
// where reads ran, and the faults ("proxy restarts" counts processes:
// every proxy of the shape restarts at each event). "run error" says the run could not be carried out to
// its end (its numbers cover what was recorded).
func WriteMatrix(w io.Writer, runs []MatrixRun) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "shape\ttarget\tsecs\tops\terrors\tkill errors\tproxy errors\tfailing after proxy up\tRYW\tmono own\tmono other\timpossible\tuncovered\treplica reads\treads by node\tkills (behind)\tproxy restarts\trun error\t")
	for i := range runs {
		m := &runs[i]
		runErr := "-"
		if m.Err != nil {
			runErr = "yes"
		}
		r := m.Report
		if r == nil {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t%s\t\n", m.Shape, m.Name(), runErr)
			continue
		}
		uncovered := "-"
		if r.Target == TargetSession || r.Target == TargetPgx {
			uncovered = fmt.Sprint(r.Count(UncoveredWrite))
		}
		ops := r.Writes + r.Reads + r.Errors + r.KillErrors + r.ProxyErrors
		outage := "-"
		if len(r.Faults.ProxyRestarts) > 0 {
			outage = r.ProxyOutage().Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%d\t%d\t%d\t%d\t%s\t%d\t%d\t%d\t%d\t%s\t%.1f%%\t%s\t%d (%d)\t%d\t%s\t\n",
			m.Shape, m.Name(), r.Elapsed.Seconds(), ops, r.Errors, r.KillErrors, r.ProxyErrors, outage,
			r.Count(ReadYourWrites), r.MonotonicCount(true), r.MonotonicCount(false), r.Count(Impossible), uncovered,
			100*r.ReplicaShare(), r.nodeShares(), len(r.Faults.Restarts), r.RestartsBehind(), len(r.Faults.ProxyRestarts), runErr)
	}
	return tw.Flush()
}
