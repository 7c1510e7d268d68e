// Command cachemiss reads two cachegrind output files of the same
// benchmark run at two counts (-benchtime) and prints, per operation,
// the difference: what one operation costs in instructions and cache
// misses, by function, the benchmark's own functions left out (they
// flush the caches between operations). See BenchmarkRoutingCold and
// docs/performance.md.
//
//	cachemiss -ops 2000 cachegrind.out.1000 cachegrind.out.3000
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

func main() {
	ops := flag.Float64("ops", 0, "the difference between the two runs' operation counts")
	skip := flag.String("skip", `BenchmarkRoutingCold`, "leave out functions matching this regular expression")
	top := flag.Int("top", 25, "functions to list")
	flag.Parse()
	if flag.NArg() != 2 || *ops <= 0 {
		fmt.Fprintln(os.Stderr, "usage: cachemiss -ops N small.out large.out")
		os.Exit(2)
	}
	skipRE, err := regexp.Compile(*skip)
	if err != nil {
		fail(err)
	}
	events, small := load(flag.Arg(0))
	_, large := load(flag.Arg(1))
	at := map[string]int{}
	for i, e := range events {
		at[e] = i
	}
	type row struct {
		fn  string
		per []float64
	}
	var rows []row
	total := make([]float64, len(events))
	for fn, l := range large {
		if skipRE.MatchString(fn) {
			continue
		}
		s := small[fn]
		if s == nil {
			s = make([]int64, len(events))
		}
		per := make([]float64, len(events))
		for i := range events {
			per[i] = float64(l[i]-s[i]) / *ops
			total[i] += per[i]
		}
		rows = append(rows, row{fn, per})
	}
	misses := func(per []float64) float64 { return per[at["D1mr"]] + per[at["D1mw"]] }
	sort.Slice(rows, func(i, j int) bool { return misses(rows[i].per) > misses(rows[j].per) })
	fmt.Printf("per operation: %.0f instructions, %.1f first-level data misses, %.1f instruction misses\n",
		total[at["Ir"]], misses(total), total[at["I1mr"]])
	for _, r := range rows[:min(*top, len(rows))] {
		fmt.Printf("%6.1f %7.1f  %s\n", misses(r.per), r.per[at["Ir"]], r.fn)
	}
}

// load sums a cachegrind output file's counts by function.
func load(path string) (events []string, byFn map[string][]int64) {
	f, err := os.Open(path)
	if err != nil {
		fail(err)
	}
	defer f.Close()
	byFn = map[string][]int64{}
	fn := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "events: "):
			events = strings.Fields(line)[1:]
		case strings.HasPrefix(line, "fn="):
			fn = line[3:]
		case fn != "" && line != "" && line[0] >= '0' && line[0] <= '9':
			f := strings.Fields(line)
			acc := byFn[fn]
			if acc == nil {
				acc = make([]int64, len(events))
				byFn[fn] = acc
			}
			for i, v := range f[1:] {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					fail(fmt.Errorf("%s: %q: %w", path, line, err))
				}
				acc[i] += n
			}
		}
	}
	if err := sc.Err(); err != nil {
		fail(err)
	}
	if events == nil {
		fail(fmt.Errorf("%s: no events line: not a cachegrind output file", path))
	}
	return events, byFn
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "cachemiss:", err)
	os.Exit(1)
}
