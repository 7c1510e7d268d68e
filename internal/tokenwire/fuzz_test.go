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

// FuzzAdd: whatever positions arrive, in whatever order, Add keeps the
// fields Encode needs (one position per cluster, at most MaxClusters with
// a SystemID, at least one), each cluster at its highest LSN, and they
// encode to a token that decodes to them.
func FuzzAdd(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0, 3})
	f.Add([]byte{0, 0, 7, 7, 1})
	f.Fuzz(func(t *testing.T, in []byte) {
		var fl Fields
		high := map[uint64]uint64{}
		for i := 0; i+1 < len(in); i += 2 {
			p := Position{LSN: uint64(in[i+1]), SystemID: uint64(in[i] % 12), Timeline: uint32(i)}
			fl.Add(p)
			high[p.SystemID] = max(high[p.SystemID], p.LSN)
		}
		if fl.N == 0 {
			return
		}
		withID := 0
		for i, p := range fl.Pos[:fl.N] {
			for _, q := range fl.Pos[:i] {
				if p.SystemID == q.SystemID {
					t.Fatalf("cluster %d twice: %+v", p.SystemID, fl.Pos[:fl.N])
				}
			}
			if p.SystemID != 0 {
				withID++
			}
			if p.LSN != high[p.SystemID] {
				t.Fatalf("cluster %d at %d, its highest is %d", p.SystemID, p.LSN, high[p.SystemID])
			}
		}
		known := len(high)
		if _, ok := high[0]; ok {
			known--
		}
		if withID > MaxClusters || fl.Overflow != (known > MaxClusters) {
			t.Fatalf("%d clusters tracked of %d, overflow %v", withID, len(high), fl.Overflow)
		}
		got, err := Decode(Encode(fl, testKey), testKey, testNow)
		if err != nil || got != fl {
			t.Fatalf("Encode then Decode: %+v, %v; want %+v", got, err, fl)
		}
	})
}
