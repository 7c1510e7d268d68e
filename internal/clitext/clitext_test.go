package clitext

import (
	"bytes"
	"testing"
	"time"
)

func TestHumanUnits(t *testing.T) {
	for in, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 kB", 16777544: "16 MB", 5 << 30: "5.0 GB"} {
		if got := HumanBytes(in); got != want {
			t.Errorf("HumanBytes(%d) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[time.Duration]string{0: "0s", 300 * time.Microsecond: "<1ms", 512 * time.Millisecond: "512ms",
		2500 * time.Millisecond: "2.5s", 90 * time.Second: "1m30s"} {
		if got := HumanDuration(in); got != want {
			t.Errorf("HumanDuration(%v) = %q, want %q", in, got, want)
		}
	}
}

func TestTable(t *testing.T) {
	tb := Table{Header: []string{"NAME", "N", "NOTE"}, Right: []bool{1: true}}
	tb.Add("a", "1", "")
	tb.Add("long name", "100", "free text")
	var b bytes.Buffer
	if err := tb.Write(&b); err != nil {
		t.Fatal(err)
	}
	want := "" +
		"NAME         N  NOTE\n" +
		"a            1\n" +
		"long name  100  free text\n"
	if b.String() != want {
		t.Errorf("table\n%s\nwant\n%s", b.String(), want)
	}
}
