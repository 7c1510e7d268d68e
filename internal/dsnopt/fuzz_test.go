package dsnopt

import "testing"

// Any text a DSN holds either sets a value or is refused; a value set
// prints as text that sets the same value again.
func FuzzValues(f *testing.F) {
	for _, s := range []string{"10", "-1s", "1m30s", "16MB", "on", "red", " 7 ", "0", "kB", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		var x targets
		for _, v := range []Value{Int{P: &x.n, Min: 1, Max: 100}, Duration{P: &x.d, Rule: NonZero}, Enum(&x.c, colorNames)} {
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
