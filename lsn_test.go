package pgreplica

import (
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"
)

func TestParseLSNRoundTrip(t *testing.T) {
	cases := []struct {
		in   string
		want LSN
		str  string
	}{
		{"0/0", 0, "0/0"},
		{"0/1", 1, "0/1"},
		{"16/B374D848", 0x16_B374D848, "16/B374D848"},
		{"16/b374d848", 0x16_B374D848, "16/B374D848"},
		{"00000016/0B374D84", 0x16_0B374D84, "16/B374D84"},
		{"0/FFFFFFFF", 0xFFFFFFFF, "0/FFFFFFFF"},
		{"1/0", 1 << 32, "1/0"},
		{"FFFFFFFF/FFFFFFFF", math.MaxUint64, "FFFFFFFF/FFFFFFFF"},
		{"aBcD/eF01", 0xABCD_0000EF01, "ABCD/EF01"},
	}
	for _, c := range cases {
		got, err := ParseLSN(c.in)
		if err != nil {
			t.Errorf("ParseLSN(%q): %v", c.in, err)
			continue
		}
		if got != c.want {
			t.Errorf("ParseLSN(%q) = %#x, want %#x", c.in, uint64(got), uint64(c.want))
		}
		if s := got.String(); s != c.str {
			t.Errorf("LSN(%#x).String() = %q, want %q", uint64(got), s, c.str)
		}
		if s := fmt.Sprintf("%X/%X", uint64(got)>>32, uint32(got)); s != got.String() {
			t.Errorf("String() = %q, PostgreSQL's %%X/%%X gives %q", got.String(), s)
		}
		back, err := ParseLSN(got.String())
		if err != nil || back != got {
			t.Errorf("ParseLSN(%q) = %v, %v; want %v", got.String(), back, err, got)
		}
	}
}

func TestLSNOrderIsNumeric(t *testing.T) {
	// Each pair is in increasing numeric order.
	pairs := [][2]string{
		{"0/FFFFFF", "1/0"},
		{"0/FFFFFF", "0/1000000"}, // text order says the opposite
		{"F/0", "10/0"},           // text order says the opposite
		{"0/9", "0/10"},           // text order says the opposite
		{"0/FFFFFFFF", "1/0"},
		{"00/1", "0/2"},
	}
	for _, p := range pairs {
		lo, err := ParseLSN(p[0])
		if err != nil {
			t.Fatal(err)
		}
		hi, err := ParseLSN(p[1])
		if err != nil {
			t.Fatal(err)
		}
		if !(lo < hi) {
			t.Errorf("%s (%d) should be below %s (%d)", p[0], lo, p[1], hi)
		}
	}
}

func TestParseLSNRejects(t *testing.T) {
	bad := []struct{ in, why string }{
		{"", "empty"},
		{"/", "missing digits before"},
		{"0", "missing '/'"},
		{"16B374", "missing '/'"},
		{"16B374D848", "more than 8"},
		{"0/", "missing digits after"},
		{"/0", "missing digits before"},
		{"0//0", "more than one '/'"},
		{"0/0/0", "more than one '/'"},
		{"123456789/0", "more than 8"},
		{"0/123456789", "more than 8"},
		{"000000000/0", "more than 8"},
		{"0x1/0", "unexpected character"},
		{"-1/0", "unexpected character"},
		{"+1/0", "unexpected character"},
		{" 0/0", "unexpected character"},
		{"0/0 ", "unexpected character"},
		{"0/0\n", "unexpected character"},
		{"0/G", "unexpected character"},
		{"0_1/0", "unexpected character"},
		{"0/1\x00", "unexpected character"},
		{"0/é", "unexpected byte 0xC3"},
		{"１/0", "unexpected byte"},
		{strings.Repeat("A", 1000), "more than 8"},
	}
	for _, c := range bad {
		got, err := ParseLSN(c.in)
		if err == nil {
			t.Errorf("ParseLSN(%q) = %v, want an error", c.in, got)
			continue
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "pgreplica: invalid LSN") || !strings.Contains(msg, c.why) {
			t.Errorf("ParseLSN(%q) error %q, want it to start with %q and say %q", c.in, msg, "pgreplica: invalid LSN", c.why)
		}
		if len(msg) > 200 {
			t.Errorf("ParseLSN error is %d bytes long; the input should be clipped: %q", len(msg), msg)
		}
		if strings.ContainsAny(msg, "\n\x00") {
			t.Errorf("ParseLSN error contains raw control characters: %q", msg)
		}
	}
}

func TestLSNScanValue(t *testing.T) {
	var _ sql.Scanner = (*LSN)(nil)
	var _ driver.Valuer = LSN(0)

	for _, src := range []any{"16/B374D848", []byte("16/b374d848")} {
		var l LSN
		if err := l.Scan(src); err != nil {
			t.Fatalf("Scan(%T): %v", src, err)
		}
		if l != 0x16_B374D848 {
			t.Fatalf("Scan(%T) = %v", src, l)
		}
	}
	l := LSN(42)
	if err := l.Scan(nil); err != nil || l != 0 {
		t.Fatalf("Scan(nil) = %v, %v; want 0/0, nil", l, err)
	}
	l = LSN(42)
	if err := l.Scan("nope"); err == nil || l != 42 {
		t.Fatalf("Scan(bad) = %v, %v; want an error and no change", l, err)
	}
	if err := l.Scan(int64(7)); err == nil || !strings.Contains(err.Error(), "int64") {
		t.Fatalf("Scan(int64) error = %v", err)
	}
	v, err := LSN(0x16_B374D848).Value()
	if err != nil || v != "16/B374D848" {
		t.Fatalf("Value() = %#v, %v", v, err)
	}
	if !driver.IsValue(v) {
		t.Fatalf("Value() returned %T, not a driver.Value", v)
	}
}

func TestLSNText(t *testing.T) {
	type payload struct {
		At LSN `json:"at"`
	}
	b, err := json.Marshal(payload{At: 0x16_B374D848})
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"at":"16/B374D848"}` {
		t.Fatalf("json = %s", b)
	}
	var p payload
	if err := json.Unmarshal(b, &p); err != nil || p.At != 0x16_B374D848 {
		t.Fatalf("Unmarshal = %v, %v", p.At, err)
	}
	if err := json.Unmarshal([]byte(`{"at":"1/2/3"}`), &p); err == nil {
		t.Fatal("Unmarshal accepted a bad LSN")
	}
}

func TestLSNStringAllocs(t *testing.T) {
	l := LSN(0x16_B374D848)
	if n := testing.AllocsPerRun(100, func() { _ = l.String() }); n > 1 {
		t.Errorf("String allocates %v times, want at most 1", n)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = ParseLSN("16/B374D848") }); n != 0 {
		t.Errorf("ParseLSN allocates %v times, want 0", n)
	}
}

var lsnSyntax = regexp.MustCompile(`^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$`)

func FuzzParseLSN(f *testing.F) {
	for _, s := range []string{"0/0", "16/B374D848", "ffffffff/ffffffff", "0/", "1//2", "123456789/0", "0x1/0", " 0/0", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseLSN(s)
		if valid := lsnSyntax.MatchString(s); valid != (err == nil) {
			t.Fatalf("ParseLSN(%q) error %v, but syntax valid = %v", s, err, valid)
		}
		if err != nil {
			if l != 0 {
				t.Fatalf("ParseLSN(%q) failed but returned %v", s, l)
			}
			return
		}
		str := l.String()
		if want := fmt.Sprintf("%X/%X", uint64(l)>>32, uint32(l)); str != want {
			t.Fatalf("String() = %q, want %q", str, want)
		}
		back, err := ParseLSN(str)
		if err != nil || back != l {
			t.Fatalf("ParseLSN(%q) = %v, %v; want %v", str, back, err, l)
		}
		var scanned LSN
		if err := scanned.Scan([]byte(s)); err != nil || scanned != l {
			t.Fatalf("Scan(%q) = %v, %v; want %v", s, scanned, err, l)
		}
	})
}
