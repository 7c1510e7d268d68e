package probe

import (
	"database/sql/driver"
	"testing"
)

func TestValues(t *testing.T) {
	for _, tc := range []struct {
		v    driver.Value
		want int64
	}{{nil, 0}, {int64(-3), -3}, {"42", 42}, {[]byte("42"), 42}, {"18446744073709551615", -1}} {
		if got, err := Int(tc.v); err != nil || got != tc.want {
			t.Errorf("Int(%#v) = %d, %v; want %d", tc.v, got, err, tc.want)
		}
	}
	if _, err := Int("4.2"); err == nil {
		t.Error(`Int("4.2") accepted`)
	}
	for _, v := range []driver.Value{nil, "", []byte{}, int64(7)} {
		if l, err := LSN(v); l != 0 || err != nil {
			t.Errorf("LSN(%#v) = %d, %v; want 0 (no position)", v, l, err)
		}
	}
	if l, err := LSN([]byte("1/0")); l != 1<<32 || err != nil {
		t.Errorf(`LSN("1/0") = %d, %v`, l, err)
	}
}

func TestAppendLSN(t *testing.T) {
	for lsn, want := range map[uint64]string{0: "0/0", 0x16B374D848: "16/B374D848", 1 << 32: "1/0", ^uint64(0): "FFFFFFFF/FFFFFFFF"} {
		if got := string(AppendLSN([]byte("x"), lsn)); got != "x"+want {
			t.Errorf("AppendLSN(%#x) = %q, want %q", lsn, got, "x"+want)
		}
	}
}
