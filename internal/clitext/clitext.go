// Package clitext is the plain text in and out of the command-line tools:
// the pgreplica command (status) and the pgreplica-dev and pgreplica-demo
// commands of the integration module. It is internal to the repository;
// its API is whatever those need.
package clitext

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Table is a plain-text table: columns separated by two spaces, padded to
// the widest cell, numbers right-aligned. The last column is not padded,
// so a long free-text column (an error, a reason) costs no trailing blanks.
type Table struct {
	Header []string
	Right  []bool // per column: right-align
	rows   [][]string
}

// Add appends a row.
func (t *Table) Add(cells ...string) { t.rows = append(t.rows, cells) }

// Write prints the header and the rows.
func (t *Table) Write(w io.Writer) error {
	width := make([]int, len(t.Header))
	for _, r := range append([][]string{t.Header}, t.rows...) {
		for i, c := range r {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for _, r := range append([][]string{t.Header}, t.rows...) {
		var line strings.Builder
		for i, c := range r {
			if i > 0 {
				line.WriteString("  ")
			}
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			switch {
			case i < len(t.Right) && t.Right[i]:
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

// HumanBytes formats a byte count the way pg_size_pretty does (1024-based
// kB, MB, GB), with one decimal below 10 units.
func HumanBytes(n uint64) string {
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

// HumanDuration formats a lag or wait: whole milliseconds below a second,
// tenths of a second below a minute, whole seconds above.
func HumanDuration(d time.Duration) string {
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
