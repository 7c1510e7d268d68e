package checker

import "fmt"

// Explain says which step of pgreplica's protocol let a violation through,
// from the positions the history recorded; primary is the primary's node
// index. It is meant for violations through pgreplica (the naive router
// has no watermark to blame). The commit LSN of a write made in the
// session is at most Wrote.WatermarkAfter, the LSN the driver captured
// after it.
func (v Violation) Explain(primary int) string {
	if v.Kind == UncoveredWrite {
		return fmt.Sprintf("the write (%s) left the session's watermark at %s: the LSN captured after it was lower, or no LSN was captured", v.Wrote.Path, v.Wrote.WatermarkAfter)
	}
	w := v.Wrote.WatermarkAfter
	committed := "committed at or before " + w.String()
	if !v.Wrote.InSession || v.Wrote.WatermarkAfter <= v.Wrote.WatermarkBefore {
		committed = "written outside a session, at an LSN the history does not know"
	}
	r := &v.Read
	later := fmt.Sprintf("node %d", r.Node)
	if r.Node != primary {
		later += " at replay " + r.ReplayLSN.String()
	}
	switch v.Kind {
	case ReadYourWrites:
		switch {
		case !r.InSession:
			return fmt.Sprintf("the read carried no session and relied on the process watermark; %s served it without the write: the process watermark did not cover the write", later)
		case !v.Wrote.InSession:
			return fmt.Sprintf("the write carried no session, so only the process watermark covered it; %s served the read", later)
		case r.WatermarkBefore < w:
			return fmt.Sprintf("the session's watermark %s was below the write's LSN %s when the read started: the write did not raise it", r.WatermarkBefore, w)
		case r.Node != primary && r.ReplayLSN < r.WatermarkBefore:
			return fmt.Sprintf("%s served a read that required %s: the replica was taken as fresh when it was not", later, r.WatermarkBefore)
		}
	case MonotonicRead:
		c := &v.Cause
		switch {
		case c.Node == r.Node && r.Node != primary && r.ReplayLSN < c.ReplayLSN:
			return fmt.Sprintf("node %d had replayed %s for the earlier read and only %s for this one: it went back in time, which only a restart does, yet the router took it for fresh enough for %s",
				r.Node, c.ReplayLSN, r.ReplayLSN, r.WatermarkBefore)
		case r.Node != primary && r.ReplayLSN < r.WatermarkBefore:
			return fmt.Sprintf("%s served a read that required %s: the replica was taken as fresh when it was not", later, r.WatermarkBefore)
		case c.Node == primary:
			return fmt.Sprintf("the earlier read ran on the primary (node %d) and saw v%d (%s), but the session's watermark stayed %s→%s; the later read required only %s and %s served it",
				c.Node, c.Version, committed, c.WatermarkBefore, c.WatermarkAfter, r.WatermarkBefore, later)
		case c.ReplayLSN > c.WatermarkAfter:
			return fmt.Sprintf("the earlier read ran on node %d, which had replayed %s and so showed v%d (%s), but the session's watermark rose only to %s, the replay position known before the read; the later read required only %s and %s served it",
				c.Node, c.ReplayLSN, c.Version, committed, c.WatermarkAfter, r.WatermarkBefore, later)
		}
	}
	return "not explained by the recorded positions"
}
