package dsnopt

import (
	"testing"
	"time"
)

// Any text a DSN holds either sets a value or is refused; a value set
// prints as text that sets the same value again.
func FuzzValues(f *testing.F) {
	for _, s := range []string{"10", "-1s", "1m30s", "16MB", "on", "red", " 7 ", "0", "kB", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		var (
			n    int
			d    time.Duration
			b    bool
			u    uint64
			c    color
			vals = []func() Value{
				func() Value { return Int{P: &n, Min: 1, Max: 100} },
				func() Value { return Duration{P: &d, Rule: NonZero} },
				func() Value { return Bool{P: &b} },
				func() Value { return Bytes{P: &u} },
				func() Value { return Enum(&c, colorNames) },
			}
		)
		for _, mk := range vals {
			v := mk()
			if v.Set(in) != nil {
				continue
			}
			text := v.String()
			if err := v.Set(text); err != nil {
				t.Fatalf("%T: %q set, its text %q does not: %v", v, in, text, err)
			}
			if again := v.String(); again != text {
				t.Fatalf("%T: %q prints %q, then %q", v, in, text, again)
			}
		}
	})
}
