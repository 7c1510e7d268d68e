package tokenwire

import (
	"strings"
	"testing"
	"time"
)

// FuzzDecode: whatever text arrives in a cookie, header or job payload,
// Decode does not panic, fails only with its own reasons and zero Fields,
// never quotes the input, and accepts only canonical tokens that keep
// their invariants and re-encode to themselves.
func FuzzDecode(f *testing.F) {
	exp := testNow.Add(time.Hour)
	for _, fl := range []Fields{one, multi, full(), fields(true, exp, Position{LSN: 1})} {
		f.Add(Encode(fl, nil), false)
		f.Add(Encode(fl, testKey), true)
	}
	for _, s := range []string{"", "AQ", "AQA", "AgA", "AgAC", "AgD_", strings.Repeat("_", MaxText+2)} {
		f.Add(s, false)
	}
	reasons := []error{ErrEmpty, ErrOversized, ErrGarbled, ErrTruncated, ErrVersion,
		ErrNeedsKey, ErrUnsigned, ErrSignature, ErrExpired, ErrClusters, ErrDuplicate}
	f.Fuzz(func(t *testing.T, s string, signed bool) {
		var key []byte
		if signed {
			key = testKey
		}
		got, err := Decode(s, key, testNow)
		if err != nil {
			known := false
			for _, r := range reasons {
				known = known || err == r
			}
			if !known || got != (Fields{}) {
				t.Fatalf("Decode(%q) = %+v, %v", s, got, err)
			}
			if len(s) > 3 && strings.Contains(err.Error(), s) {
				t.Fatalf("error %q reflects the input", err)
			}
			return
		}
		if len(s) > MaxText || got.N < 1 || got.N > MaxPositions || got.N == 1 && !got.Overflow && strings.HasPrefix(s, "Ag") {
			t.Fatalf("Decode(%q) accepted %+v", s, got)
		}
		withID := 0
		for i, p := range got.Pos[:got.N] {
			for _, q := range got.Pos[:i] {
				if p.SystemID == q.SystemID {
					t.Fatalf("Decode(%q): cluster %d twice", s, p.SystemID)
				}
			}
			if p.SystemID != 0 {
				withID++
			}
		}
		if withID > MaxClusters || !got.Expires.IsZero() && !testNow.Before(got.Expires) {
			t.Fatalf("Decode(%q) accepted %+v", s, got)
		}
		if again := Encode(got, key); again != s {
			t.Fatalf("Decode(%q) = %+v re-encodes to %q", s, got, again)
		}
	})
}
