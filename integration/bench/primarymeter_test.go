package bench

import (
	"context"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica/integration"
)

// primaryMeter reads how much work the primary has done so far: the
// statements it ran, from pg_stat_statements (as TestRoundTrips counts
// them), and the CPU time of all its processes (integration.ServerCPU). A
// benchmark
// reads it before and after a run of writes and divides the difference by
// the writes, so that "what a write costs the primary" is measured on the
// server, whatever the driver does to get there: pgreplica's captures of
// write positions count too, whenever they run.
type primaryMeter struct {
	stmts *statementCounter // nil when the server has no pg_stat_statements
	node  int
	pid   int // the primary's postmaster; 0 when its CPU cannot be read
}

// primaryWork is one reading of a primaryMeter: statements is -1 and cpu
// negative when unknown.
type primaryWork struct {
	statements int64
	cpu        time.Duration
}

// newPrimaryMeter logs, and leaves out, what cannot be measured here.
func newPrimaryMeter(tb testing.TB, ctx context.Context) *primaryMeter {
	tb.Helper()
	m := &primaryMeter{stmts: newStatementCounter(tb, ctx), node: cluster.Primary()}
	pid, err := cluster.PID(m.node)
	if err == nil {
		_, err = integration.ServerCPU(pid)
	}
	if err != nil {
		tb.Logf("the primary's CPU time is not measured: %v", err)
	} else {
		m.pid = pid
	}
	return m
}

// begin reads the meter before a run and end after it. The statement
// count is read outside the CPU window, so that the meter's own query on
// the primary is not charged to the run (nor counted: countSQL leaves it
// out).
func (m *primaryMeter) begin(tb testing.TB, ctx context.Context) primaryWork {
	tb.Helper()
	s := m.stmts.everything(tb, ctx, m.node)
	return primaryWork{statements: s, cpu: m.cpu(tb)}
}

func (m *primaryMeter) end(tb testing.TB, ctx context.Context) primaryWork {
	tb.Helper()
	c := m.cpu(tb)
	return primaryWork{statements: m.stmts.everything(tb, ctx, m.node), cpu: c}
}

func (m *primaryMeter) cpu(tb testing.TB) time.Duration {
	tb.Helper()
	if m.pid == 0 {
		return -1
	}
	d, err := integration.ServerCPU(m.pid)
	if err != nil {
		tb.Fatalf("the primary's CPU time: %v", err)
	}
	return d
}

// since returns the work done between an earlier reading and w, with the
// same conventions for what is unknown.
func (w primaryWork) since(earlier primaryWork) primaryWork {
	d := primaryWork{statements: -1, cpu: -1}
	if w.statements >= 0 && earlier.statements >= 0 {
		d.statements = w.statements - earlier.statements
	}
	if w.cpu >= 0 && earlier.cpu >= 0 {
		d.cpu = w.cpu - earlier.cpu
	}
	return d
}
