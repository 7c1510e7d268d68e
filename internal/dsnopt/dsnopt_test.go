package dsnopt

import (
	"testing"
	"time"
)

type color int

var colorNames = []Name[color]{{Name: "red", V: 1}, {Name: "dark_blue", V: 2}}

// targets are a variable of each type the values set.
type targets struct {
	n int
	d time.Duration
	s string
	c color
}

// Each value takes the text it documents and refuses the rest, saying
// why, and prints back what it took.
func TestValues(t *testing.T) {
	var (
		v  targets
		ok = func(val Value, in, want string) {
			t.Helper()
			if err := val.Set(in); err != nil {
				t.Errorf("Set(%q): %v", in, err)
			} else if got := val.String(); got != want {
				t.Errorf("Set(%q) then String() = %q, want %q", in, got, want)
			}
		}
		bad = func(val Value, in, why string) {
			t.Helper()
			if err := val.Set(in); err == nil || err.Error() != why {
				t.Errorf("Set(%q) = %v, want %q", in, err, why)
			}
		}
	)
	ok(Int{P: &v.n, Min: 1}, " 10 ", "10")
	bad(Int{P: &v.n, Min: 1}, "0", "want an integer > 0")
	bad(Int{P: &v.n}, "-1", "want an integer >= 0")
	bad(Int{P: &v.n, Min: 1, Max: 100}, "101", "want an integer >= 1 and <= 100")
	ok(Duration{P: &v.d, Rule: Positive}, "1m30s", "1m30s")
	bad(Duration{P: &v.d, Rule: Positive}, "0s", "want a duration > 0 (omit the option for the default)")
	bad(Duration{P: &v.d, Rule: NonNegative}, "-1s", "want a duration >= 0 (0 means no bound)")
	ok(Duration{P: &v.d, Rule: NonZero}, "-1s", "-1s")
	bad(Duration{P: &v.d, Rule: NonZero}, "0", "want a duration > 0, or a negative one such as -1s to disable (omit the option for the default)")
	bad(Duration{P: &v.d}, "5", "want a Go duration such as 150ms, 5s or 1m30s")
	ok(String{P: &v.s}, " any text ", " any text ")
	ok(Enum(&v.c, colorNames), "Dark-Blue", "dark_blue")
	bad(Enum(&v.c, colorNames), "green", "want one of red, dark_blue")
	v.c = 7
	if got := Enum(&v.c, colorNames).String(); got != "7" {
		t.Errorf("an unnamed value prints %q", got)
	}
}

func TestIsZero(t *testing.T) {
	var v targets
	for _, x := range []Value{Int{P: &v.n}, Duration{P: &v.d}, String{P: &v.s}, Enum(&v.c, colorNames)} {
		if !x.IsZero() {
			t.Errorf("%T of a zero value is not zero", x)
		}
	}
	v.n = 1
	if (Int{P: &v.n}).IsZero() {
		t.Error("a set value is zero")
	}
}

func TestNames(t *testing.T) {
	if s, ok := NameOf(colorNames, 2); !ok || s != "dark_blue" {
		t.Errorf("NameOf(2) = %q, %v", s, ok)
	}
	if Named(colorNames, 3) || !Named(colorNames, 1) {
		t.Error("Named is wrong")
	}
	if got := List(colorNames); got != "red, dark_blue" {
		t.Errorf("List = %q", got)
	}
}

// A misspelt option name within three edits finds the closest one.
func TestClosest(t *testing.T) {
	names := []string{"pgreplica_max_lag", "pgreplica_max_lag_bytes", "pgreplica_zone"}
	for in, want := range map[string]string{
		"pgreplica_max_lg":        "pgreplica_max_lag",
		"pgreplica_max_lag_byte":  "pgreplica_max_lag_bytes",
		"pgreplica_zones":         "pgreplica_zone",
		"pgreplica_xyzzy_plugh_q": "",
	} {
		if got := Closest(in, names); got != want {
			t.Errorf("Closest(%q) = %q, want %q", in, got, want)
		}
	}
	if d := editDistance("kitten", "sitting"); d != 3 {
		t.Errorf("editDistance = %d, want 3", d)
	}
}
