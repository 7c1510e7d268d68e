// Package dsnopt holds the values of pgreplica's own DSN options
// (pgreplica_*) as text: integers within bounds, durations in Go's
// syntax with the rule each option puts on 0 and negatives, booleans as
// libpq spells them, byte counts with PostgreSQL's memory units,
// enumerations by name, and the "did you mean" of a misspelt option name.
// It needs no router and knows neither Config nor the option table: the
// root package binds each option to its Config field with these values.
// Its tests, and the fuzz test of the values' text, run with
// `go test ./internal/dsnopt/`.
package dsnopt

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/pgreplica/pgreplica/internal/libpqdsn"
)

// Value reads and writes one setting as DSN text.
type Value interface {
	Set(s string) error // the error says why, without name or value
	String() string
	IsZero() bool
}

func trim(s string) string { return strings.Trim(s, libpqdsn.Spaces) }

// Name is the DSN's name for one value of an enumeration.
type Name[T comparable] struct {
	Name string
	V    T
}

// NameOf returns the name of v in names.
func NameOf[T comparable](names []Name[T], v T) (string, bool) {
	for _, n := range names {
		if n.V == v {
			return n.Name, true
		}
	}
	return "", false
}

// Named reports whether v is one of the values names lists.
func Named[T comparable](names []Name[T], v T) bool {
	_, ok := NameOf(names, v)
	return ok
}

// List is names' names, comma-separated, for an error message.
func List[T comparable](names []Name[T]) string {
	s := make([]string, len(names))
	for i, n := range names {
		s[i] = n.Name
	}
	return strings.Join(s, ", ")
}

type enum[T comparable] struct {
	p     *T
	names []Name[T]
}

// Enum is the enumeration *p, spelt as names says (in any case, '-' for
// '_').
func Enum[T comparable](p *T, names []Name[T]) Value { return enum[T]{p, names} }

func (o enum[T]) Set(s string) error {
	s = strings.ReplaceAll(trim(s), "-", "_")
	for _, n := range o.names {
		if strings.EqualFold(s, n.Name) {
			*o.p = n.V
			return nil
		}
	}
	return fmt.Errorf("want one of %s", List(o.names))
}

func (o enum[T]) String() string {
	if s, ok := NameOf(o.names, *o.p); ok {
		return s
	}
	return fmt.Sprint(*o.p)
}

func (o enum[T]) IsZero() bool { var zero T; return *o.p == zero }

// Int is an integer of at least Min and, when Max is not 0, at most Max.
type Int struct {
	P        *int
	Min, Max int
}

func (o Int) Set(s string) error {
	n, err := strconv.Atoi(trim(s))
	if err == nil && o.Max > 0 && n > o.Max {
		return fmt.Errorf("want an integer >= %d and <= %d", o.Min, o.Max)
	}
	if err != nil || n < o.Min {
		if o.Min == 1 {
			return fmt.Errorf("want an integer > 0")
		}
		return fmt.Errorf("want an integer >= %d", o.Min)
	}
	*o.P = n
	return nil
}
func (o Int) String() string { return strconv.Itoa(*o.P) }
func (o Int) IsZero() bool   { return *o.P == 0 }

// Rule is what a Duration option makes of 0 and of negatives.
type Rule int

const (
	Positive    Rule = iota // > 0; 0 would silently mean the default
	NonNegative             // >= 0; 0 means no bound
	NonZero                 // != 0; negative disables
)

// Duration is a duration in Go's syntax, within its Rule.
type Duration struct {
	P    *time.Duration
	Rule Rule
}

func (o Duration) Set(s string) error {
	d, err := time.ParseDuration(trim(s))
	if err != nil {
		return fmt.Errorf("want a Go duration such as 150ms, 5s or 1m30s")
	}
	switch {
	case o.Rule == Positive && d <= 0:
		return fmt.Errorf("want a duration > 0 (omit the option for the default)")
	case o.Rule == NonNegative && d < 0:
		return fmt.Errorf("want a duration >= 0 (0 means no bound)")
	case o.Rule == NonZero && d == 0:
		return fmt.Errorf("want a duration > 0, or a negative one such as -1s to disable (omit the option for the default)")
	}
	*o.P = d
	return nil
}
func (o Duration) String() string { return o.P.String() }
func (o Duration) IsZero() bool   { return *o.P == 0 }

// String is any text.
type String struct{ P *string }

func (o String) Set(s string) error { *o.P = s; return nil }
func (o String) String() string     { return *o.P }
func (o String) IsZero() bool       { return *o.P == "" }

// Closest returns the name within edit distance 3 of s, the closest
// first in names' order; "" if none is.
func Closest(s string, names []string) string {
	best, bestD := "", 4
	for _, n := range names {
		if d := editDistance(s, n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
