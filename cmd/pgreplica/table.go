package main

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pgreplica/pgreplica"
)

// table is a plain-text table: columns separated by two spaces, padded to
// the widest cell, numbers right-aligned. The last column is not padded,
// so a long free-text column (an error, a reason) costs no trailing blanks.
type table struct {
	header []string
	right  []bool // per column: right-align
	rows   [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) write(w io.Writer) error {
	width := make([]int, len(t.header))
	for _, r := range append([][]string{t.header}, t.rows...) {
		for i, c := range r {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for _, r := range append([][]string{t.header}, t.rows...) {
		var line strings.Builder
		for i, c := range r {
			if i > 0 {
				line.WriteString("  ")
			}
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			switch {
			case i < len(t.right) && t.right[i]:
				line.WriteString(pad + c)
			case i == len(r)-1:
				line.WriteString(c)
			default:
				line.WriteString(c + pad)
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " ") + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// renderStatus prints a status report: a summary line, one row per host,
// and the errors that have no column of their own.
func renderStatus(w io.Writer, rep report) error {
	var primary []string
	replicas, reading := 0, 0
	for _, n := range rep.Nodes {
		switch {
		case n.Error != "":
		case n.Role == "primary":
			primary = append(primary, n.Addr)
		case n.Role == "replica":
			replicas++
			if n.Reads {
				reading++
			}
		}
	}
	p := "no primary"
	if len(primary) > 0 {
		p = "primary " + strings.Join(primary, ", ")
	}
	fmt.Fprintf(w, "%d hosts at %s: %s; %d of %d reachable replicas take reads\n",
		rep.Hosts, rep.At.Format("15:04:05"), p, reading, replicas)
	switch {
	case errors.Is(rep.PingErr, pgreplica.ErrNoReachableHost):
		// Each row says why; the joined message would repeat them all.
		fmt.Fprintln(w, "writes: no host is reachable")
	case rep.PingErr != nil:
		fmt.Fprintf(w, "writes: %v\n", rep.PingErr)
	}
	fmt.Fprintln(w)

	t := table{
		header: []string{"NODE", "ZONE", "ROLE", "STATE", "TL", "LSN", "LAG", "LAG TIME", "PAUSED", "SYNC", "CONFLICTS", "READS", "WHY"},
		right:  []bool{4: true, 6: true, 7: true, 10: true},
	}
	var notes []string
	for _, n := range rep.Nodes {
		tl, lag, lagTime, paused := "-", "-", "-", "-"
		if n.Timeline != 0 {
			tl = strconv.FormatUint(uint64(n.Timeline), 10)
		}
		if n.LagBytes != nil {
			lag = humanBytes(*n.LagBytes)
		}
		if n.LagMs != nil {
			lagTime = humanDuration(time.Duration(*n.LagMs * float64(time.Millisecond)))
		}
		if n.Role == "replica" {
			paused = yesNo(n.ReplayPaused)
		}
		conflicts := "-"
		switch {
		case n.Conflicts != nil:
			conflicts = strconv.FormatInt(*n.Conflicts, 10)
		case n.ConflictsError != "":
			conflicts = "?"
			notes = append(notes, fmt.Sprintf("conflicts of %s: %s", n.Addr, n.ConflictsError))
		}
		t.add(n.Addr, dash(n.Zone), n.Role, n.State, tl, dash(n.LSN), lag, lagTime, paused,
			dash(n.SyncState), conflicts, yesNo(n.Reads), n.Why)
	}
	if err := t.write(w); err != nil {
		return err
	}
	for _, s := range notes {
		if _, err := fmt.Fprintln(w, s); err != nil {
			return err
		}
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// humanBytes formats a byte count the way pg_size_pretty does (1024-based
// kB, MB, GB), with one decimal below 10 units.
func humanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatUint(n, 10) + " B"
	}
	v := float64(n)
	for _, u := range []string{"kB", "MB", "GB", "TB"} {
		v /= unit
		if v < unit || u == "TB" {
			if v < 10 {
				return fmt.Sprintf("%.1f %s", v, u)
			}
			return fmt.Sprintf("%.0f %s", v, u)
		}
	}
	panic("unreachable")
}

// humanDuration formats a lag or wait: whole milliseconds below a second,
// tenths of a second below a minute, whole seconds above.
func humanDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Millisecond:
		return "<1ms"
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	}
	return d.Round(time.Second).String()
}

// renderDemo prints the side-by-side comparison and what it means.
func renderDemo(w io.Writer, res demoResult) error {
	t := table{header: []string{"scenario: runs that showed the bug", "naive router", "pgreplica"}, right: []bool{false, true, true}}
	for i, s := range scenarios {
		t.add(s.title, fmt.Sprintf("%d of %d", res.naive.bad[i], res.runs), fmt.Sprintf("%d of %d", res.pgr.bad[i], res.runs))
	}
	st := res.pgr.stats
	served := st.ReplicaReads + st.PrimaryReads + st.FallbackReads
	t.add("", "", "")
	t.add("reads served by replicas", fmt.Sprintf("%s of %d", percent(res.naive.reads, res.naive.reads), res.naive.reads),
		fmt.Sprintf("%s of %d", percent(st.ReplicaReads, served), served))
	t.add("wait for a fresh replica, p50 / p95", "none", fmt.Sprintf("≤%s / ≤%s", humanDuration(st.Wait.P50), humanDuration(st.Wait.P95)))
	t.add("fallbacks to the primary, by reason", "none", fallbackList(st.Fallbacks))
	t.add("time for all runs", humanDuration(res.naive.elapsed), humanDuration(res.pgr.elapsed))
	if err := t.write(w); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%s\n", demoSentence(res))
	return err
}

// demoSentence says in one sentence what the table shows.
func demoSentence(res demoResult) string {
	st := res.pgr.stats
	total := res.runs * len(scenarios)
	naive, pgr := res.naive.totalBad(), res.pgr.totalBad()
	fallbacks := int64(0)
	for _, n := range st.Fallbacks {
		fallbacks += n
	}
	served := st.ReplicaReads + st.PrimaryReads + st.FallbackReads
	verdict := "none"
	if pgr > 0 {
		verdict = fmt.Sprintf("%d (a bug: please report it)", pgr)
	}
	fallback := "none had to fall back to the primary"
	if fallbacks > 0 {
		fallback = fmt.Sprintf("%d that found none within %s read from the primary", fallbacks, humanDuration(res.budget))
	}
	return wrap(fmt.Sprintf("Reading straight from replicas, the naive router showed users data older than "+
		"what they had just written, or had just seen, in %d of %d runs: a replica that has not replayed a "+
		"commit yet answers with the old rows and no error. pgreplica showed %s, and still served %s of its "+
		"reads from replicas: a read that must see a write waited (median ≤%s) for a replica that had "+
		"replayed it, and %s.",
		naive, total, verdict, percent(st.ReplicaReads, served), humanDuration(st.Wait.P50), fallback), 78)
}

// percent formats part of whole; a share that is not exactly 0 or 100%
// never rounds to it.
func percent(part, whole int64) string {
	if whole == 0 {
		return "-"
	}
	p := 100 * float64(part) / float64(whole)
	if s := fmt.Sprintf("%.0f%%", p); part == whole || part == 0 || (s != "100%" && s != "0%") {
		return s
	}
	return fmt.Sprintf("%.1f%%", p)
}

// fallbackList formats fallbacks by reason in a stable order.
func fallbackList(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// wrap breaks text into lines of at most width runes, at spaces.
func wrap(s string, width int) string {
	var b strings.Builder
	n := 0
	for i, word := range strings.Fields(s) {
		l := utf8.RuneCountInString(word)
		switch {
		case i == 0:
		case n+1+l > width:
			b.WriteByte('\n')
			n = 0
		default:
			b.WriteByte(' ')
			n++
		}
		b.WriteString(word)
		n += l
	}
	return b.String()
}
