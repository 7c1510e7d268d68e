//go:build linux

package patronitest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration/checker"
	"github.com/pgreplica/pgreplica/integration/patroni"
)

// finalState is what the cluster kept: every wlog row on the leader after
// the run, and the leader's timeline and its ancestors.
type finalState struct {
	rows      map[[2]int]logRow // (session, seq) → row
	timeline  int
	ancestors map[int]bool // the final timeline and every one it descends from
}

type logRow struct {
	port     int
	timeline int
}

// readFinal reads the final state from member leader.
func readFinal(ctx context.Context, c *patroni.Cluster, leader int) (*finalState, error) {
	conn, err := pgx.Connect(ctx, c.MemberDSN(leader))
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	fs := &finalState{rows: map[[2]int]logRow{}, ancestors: map[int]bool{}}
	rows, err := conn.Query(ctx, "SELECT session, seq, port, walfile FROM wlog")
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var s, q, port int
		var walfile string
		if err := rows.Scan(&s, &q, &port, &walfile); err != nil {
			return nil, err
		}
		fs.rows[[2]int{s, q}] = logRow{port: port, timeline: timelineOf(walfile)}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var walfile string
	if err := conn.QueryRow(ctx, "SELECT pg_walfile_name(pg_current_wal_lsn())").Scan(&walfile); err != nil {
		return nil, err
	}
	fs.timeline = timelineOf(walfile)
	fs.ancestors[fs.timeline] = true
	if fs.timeline > 1 {
		// The history file of the leader's timeline lists its ancestors,
		// one a line: "<timeline>\t<switch LSN>\t<reason>".
		var history string
		name := fmt.Sprintf("pg_wal/%08X.history", fs.timeline)
		if err := conn.QueryRow(ctx, "SELECT pg_read_file($1)", name).Scan(&history); err != nil {
			return nil, fmt.Errorf("reading %s: %w", name, err)
		}
		for _, line := range strings.Split(history, "\n") {
			f := strings.Fields(line)
			if len(f) == 0 || strings.HasPrefix(f[0], "#") {
				continue
			}
			if tl, err := strconv.Atoi(f[0]); err == nil {
				fs.ancestors[tl] = true
			}
		}
	}
	return fs, nil
}

// poisoned is the lowest watermark no replica can reach: the driver's
// bound for a position it could not read (7FFFFFFF/FFFFFFFF).
const poisoned = pgreplica.LSN(^uint64(0) >> 1)

// Reasons an operation is left out of the consistency check.
var (
	errLost    = errors.New("acknowledged, then lost by the cluster")
	errSawLost = errors.New("read a version the cluster lost afterwards")
)

// outcome is what a run showed.
type outcome struct {
	writes, acked, reads, readsOK, replicaReads int
	// lostFailover: acknowledged writes the cluster did not keep, sent to
	// the primary of their time (a failover to a replica that lacked them).
	lostFailover []op
	// lostAbandoned: acknowledged writes lost with a timeline the manager
	// promoted and then abandoned (the old leader kept or took back the
	// leader key: Patroni's doing, not pgreplica's).
	lostAbandoned []op
	// demoted: acknowledged writes started on a server after a newer
	// timeline had been promoted elsewhere (the split-brain guard failed).
	demoted []op
	// demotedReads: reads that ran on a server out of recovery after a
	// newer timeline had been promoted elsewhere.
	demotedReads []op
	// sawLost: reads of versions the cluster did not keep, left out of the
	// check (they were true when read).
	sawLost int
	// unknownLost: lost acknowledged writes whose server is unknown.
	unknownLost []op
	violations  []checker.Violation
	uncovered   []checker.Violation
	writeErrors map[string]int
	readErrors  map[string]int
	failedOps   []op
	// writesPoisoned counts acknowledged writes made while their session's
	// watermark was already at or past 7FFFFFFF/FFFFFFFF.
	writesPoisoned int
	history        checker.History
	ops            []op
}

// analyse judges ops against what the cluster kept (fs) and the
// promotions the role watch saw.
func analyse(ops []op, fs *finalState, promotions []patroni.Promotion, events []patroni.RoleEvent, c *patroni.Cluster) *outcome {
	out := &outcome{writeErrors: map[string]int{}, readErrors: map[string]int{}}
	promotedTL := map[int]bool{}
	for _, p := range promotions {
		promotedTL[p.Timeline] = true
	}
	// newestBefore is the newest timeline promoted before t.
	newestBefore := func(t time.Time) int {
		tl := 0
		for _, p := range promotions {
			if p.At.Before(t) {
				tl = max(tl, p.Timeline)
			}
		}
		return tl
	}
	lostVersions := map[checker.Key]map[int]bool{}
	for i := range ops {
		o := &ops[i]
		if o.Kind != checker.OpWrite {
			continue
		}
		out.writes++
		row, kept := fs.rows[[2]int{o.Session, o.LogSeq}]
		if kept && o.Node < 0 {
			o.Node, o.Timeline = c.NodeAt(row.port), row.timeline
		}
		if !kept {
			if lostVersions[o.Key] == nil {
				lostVersions[o.Key] = map[int]bool{}
			}
			lostVersions[o.Key][o.Version] = true
		}
		if o.Err != nil {
			out.writeErrors[errorClass(c, o.Err)]++
			out.failedOps = append(out.failedOps, *o)
			continue
		}
		out.acked++
		demoted := o.Timeline > 0 && newestBefore(o.Start) > o.Timeline
		if demoted {
			out.demoted = append(out.demoted, *o)
		}
		if kept {
			continue
		}
		switch {
		case demoted:
		case o.Timeline == 0:
			out.unknownLost = append(out.unknownLost, *o)
		case promotedTL[o.Timeline] && !fs.ancestors[o.Timeline]:
			out.lostAbandoned = append(out.lostAbandoned, *o)
		default:
			out.lostFailover = append(out.lostFailover, *o)
		}
		o.Err = errLost
	}
	for i := range ops {
		o := &ops[i]
		if o.Kind != checker.OpRead {
			continue
		}
		out.reads++
		if o.Err != nil {
			out.readErrors[errorClass(c, o.Err)]++
			out.failedOps = append(out.failedOps, *o)
			continue
		}
		out.readsOK++
		if !o.OnPrimary {
			out.replicaReads++
		} else if tl := primaryTimeline(events, o.Node, o.Start); tl > 0 && newestBefore(o.Start) > tl {
			out.demotedReads = append(out.demotedReads, *o)
		}
		if lostVersions[o.Key][o.Version] {
			out.sawLost++
			o.Err = errSawLost
		}
	}
	h := checker.History{}
	for _, o := range ops {
		h.Ops = append(h.Ops, o.Op)
	}
	slices.SortStableFunc(h.Ops, func(a, b checker.Op) int { return a.Start.Compare(b.Start) })
	out.history = h
	out.violations = checker.Check(h)
	for _, v := range checker.CheckWatermarks(h) {
		// A watermark at or past 7FFFFFFF/FFFFFFFF is one no replica
		// reaches: it cannot rise, and the session's reads go to the
		// primary. Counted apart.
		if v.Wrote.WatermarkBefore >= poisoned {
			out.writesPoisoned++
			continue
		}
		out.uncovered = append(out.uncovered, v)
	}
	out.ops = ops
	return out
}

// primaryTimeline is the timeline member was last seen a primary on, at or
// before t, 0 if it was not seen a primary then.
func primaryTimeline(events []patroni.RoleEvent, member int, t time.Time) int {
	tl := 0
	for _, e := range events {
		if e.At.After(t) {
			break
		}
		if e.Member != member {
			continue
		}
		tl = 0
		if e.Role == patroni.RolePrimary {
			tl = e.Timeline
		}
	}
	return tl
}

var (
	lsnRE    = regexp.MustCompile(`\b[0-9A-F]+/[0-9A-F]+\b`)
	addrRE   = regexp.MustCompile(`127\.0\.0\.1:\d+|\[::1\]:\d+`)
	keyRE    = regexp.MustCompile(`^(write|read) \(\d+,\d+\)( v\d+)? \(([^)]*)\): `)
	numberRE = regexp.MustCompile(`m?\d+(\.\d+)?(ms|µs|s)?`)
)

// errorClass is an error's message with the numbers and positions that
// differ between occurrences taken out, and members' addresses named
// (m0, m1…), for grouping.
func errorClass(c *patroni.Cluster, err error) string {
	s := err.Error()
	s = keyRE.ReplaceAllString(s, "$1 ($3): ")
	s = lsnRE.ReplaceAllString(s, "<lsn>")
	s = addrRE.ReplaceAllStringFunc(s, func(a string) string {
		_, port, _ := strings.Cut(a, "]:")
		if port == "" {
			_, port, _ = strings.Cut(a, ":")
		}
		if p, err := strconv.Atoi(port); err == nil {
			if m := c.NodeAt(p); m >= 0 {
				return fmt.Sprintf("<m%d>", m)
			}
		}
		return "<addr>"
	})
	s = numberRE.ReplaceAllStringFunc(s, func(n string) string {
		if strings.HasPrefix(n, "m") {
			return n
		}
		return "#"
	})
	if len(s) > 400 {
		s = s[:400] + "…"
	}
	return s
}

// groups renders error classes by count, most frequent first.
func groups(m map[string]int) string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(m[b], m[a]), cmp.Compare(a, b)) })
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "\n    %5d × %s", m[k], k)
	}
	return b.String()
}

// gap is a stretch of time without a successful write.
type gap struct {
	from, to time.Time
}

func (g gap) d() time.Duration { return g.to.Sub(g.from) }

// writeGaps returns the stretches between successive successful writes
// (acknowledged and kept), from began to ended, longest first.
func writeGaps(ops []op, began, ended time.Time) []gap {
	var ends []time.Time
	for _, o := range ops {
		if o.Kind == checker.OpWrite && o.Err == nil {
			ends = append(ends, o.End)
		}
	}
	slices.SortFunc(ends, func(a, b time.Time) int { return a.Compare(b) })
	var gaps []gap
	prev := began
	for _, e := range ends {
		gaps = append(gaps, gap{prev, e})
		prev = e
	}
	gaps = append(gaps, gap{prev, ended})
	slices.SortFunc(gaps, func(a, b gap) int { return cmp.Compare(b.d(), a.d()) })
	return gaps
}

// firstWriteAfter returns the first successful write that ended at or after
// t on member m (-1: on any member).
func firstWriteAfter(ops []op, t time.Time, m int) (op, bool) {
	var best op
	found := false
	for _, o := range ops {
		if o.Kind != checker.OpWrite || o.Err != nil || o.End.Before(t) || (m >= 0 && o.Node != m) {
			continue
		}
		if !found || o.End.Before(best.End) {
			best, found = o, true
		}
	}
	return best, found
}

// afterPromotion tells what of the time to the first write on promoted
// member pr is the router's: when it first ran anything there (a read
// waiting for a primary, or a write), how long after the promotion the
// writes then waiting for a primary were acknowledged, and how long the
// writes begun in the second after it took. The first write on it also
// waits for a session to come to its write: the workload's share.
func afterPromotion(ops []op, pr patroni.Promotion) string {
	var first time.Time
	var waiting, begun []time.Duration
	for _, o := range ops {
		if o.Err != nil || o.Node != pr.Member || o.End.Before(pr.At) {
			continue
		}
		if (o.Kind == checker.OpWrite || o.OnPrimary) && (first.IsZero() || o.End.Before(first)) {
			first = o.End
		}
		switch {
		case o.Kind != checker.OpWrite:
		case o.Start.Before(pr.At):
			waiting = append(waiting, o.End.Sub(pr.At))
		case o.Start.Before(pr.At.Add(time.Second)):
			begun = append(begun, o.End.Sub(o.Start))
		}
	}
	if first.IsZero() {
		return ""
	}
	s := fmt.Sprintf("; the router's first operation on it %s later", first.Sub(pr.At).Round(time.Millisecond))
	if len(waiting) > 0 {
		s += fmt.Sprintf(", %d writes waiting at the promotion acknowledged %s–%s after it", len(waiting),
			slices.Min(waiting).Round(time.Millisecond), slices.Max(waiting).Round(time.Millisecond))
	}
	if len(begun) > 0 {
		slices.Sort(begun)
		s += fmt.Sprintf(", %d writes begun in the second after it took %s median, %s at most", len(begun),
			begun[len(begun)/2].Round(time.Millisecond), begun[len(begun)-1].Round(time.Millisecond))
	}
	return s
}

// firstWriteStarted returns the successful write that started at or after
// t and was acknowledged first.
func firstWriteStarted(ops []op, t time.Time) (op, bool) {
	var best op
	found := false
	for _, o := range ops {
		if o.Kind == checker.OpWrite && o.Err == nil && !o.Start.Before(t) && (!found || o.End.Before(best.End)) {
			best, found = o, true
		}
	}
	return best, found
}

// failuresBetween counts failed operations of kind that started in [from, to).
func failuresBetween(ops []op, kind checker.OpKind, from, to time.Time) int {
	n := 0
	for _, o := range ops {
		if o.Kind == kind && o.Err != nil && !errors.Is(o.Err, errLost) && !errors.Is(o.Err, errSawLost) &&
			!o.Start.Before(from) && o.Start.Before(to) {
			n++
		}
	}
	return n
}

// firstReadOn returns the first successful read on member m that started
// at or after t.
func firstReadOn(ops []op, t time.Time, m int) (op, bool) {
	var best op
	found := false
	for _, o := range ops {
		if o.Kind == checker.OpRead && o.Err == nil && o.Node == m && !o.Start.Before(t) && (!found || o.End.Before(best.End)) {
			best, found = o, true
		}
	}
	return best, found
}

// readsOnAfter counts the successful reads on member m that started at or
// after t.
func readsOnAfter(ops []op, t time.Time, m int) int {
	n := 0
	for _, o := range ops {
		if o.Kind == checker.OpRead && o.Err == nil && o.Node == m && !o.Start.Before(t) {
			n++
		}
	}
	return n
}
