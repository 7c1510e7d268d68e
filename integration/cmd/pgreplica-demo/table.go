package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/pgreplica/pgreplica/internal/clitext"
)

// renderDemo prints the side-by-side comparison and what it means.
func renderDemo(w io.Writer, res demoResult) error {
	t := clitext.Table{Header: []string{"scenario: runs that showed the bug", "naive router", "pgreplica"}, Right: []bool{false, true, true}}
	for i, s := range scenarios {
		t.Add(s.title, fmt.Sprintf("%d of %d", res.naive.bad[i], res.runs), fmt.Sprintf("%d of %d", res.pgr.bad[i], res.runs))
	}
	st := res.pgr.stats
	served := st.ReplicaReads + st.PrimaryReads + st.FallbackReads
	t.Add("", "", "")
	t.Add("reads served by replicas", fmt.Sprintf("%s of %d", percent(res.naive.reads, res.naive.reads), res.naive.reads),
		fmt.Sprintf("%s of %d", percent(st.ReplicaReads, served), served))
	t.Add("wait for a fresh replica, p50 / p95", "none", fmt.Sprintf("~%s / ~%s", clitext.HumanDuration(st.Wait.P50), clitext.HumanDuration(st.Wait.P95)))
	t.Add("fallbacks to the primary, by reason", "none", fallbackList(st.Fallbacks))
	t.Add("time for all runs", clitext.HumanDuration(res.naive.elapsed), clitext.HumanDuration(res.pgr.elapsed))
	if err := t.Write(w); err != nil {
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
		fallback = fmt.Sprintf("%d that found none within %s read from the primary", fallbacks, clitext.HumanDuration(res.budget))
	}
	return wrap(fmt.Sprintf("Reading straight from replicas, the naive router showed users data older than "+
		"what they had just written, or had just seen, in %d of %d runs: a replica that has not replayed a "+
		"commit yet answers with the old rows and no error. pgreplica showed %s, and still served %s of its "+
		"reads from replicas: a read that must see a write waited (median ~%s) for a replica that had "+
		"replayed it, and %s.",
		naive, total, verdict, percent(st.ReplicaReads, served), clitext.HumanDuration(st.Wait.P50), fallback), 78)
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
