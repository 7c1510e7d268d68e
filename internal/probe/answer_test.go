package probe

import (
	"database/sql/driver"
	"reflect"
	"testing"
	"time"
)

func TestParseDelay(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"0": 0, "300ms": 300 * time.Millisecond, "2s": 2 * time.Second, "1min": time.Minute, "5": 5 * time.Millisecond,
	} {
		if got, err := parseDelay(in); err != nil || got != want {
			t.Errorf("parseDelay(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "ms", "3 parsecs", "1x", "107000d"} {
		if _, err := parseDelay(bad); err == nil {
			t.Errorf("parseDelay(%q) accepted", bad)
		}
	}
}

// TestParse reads answers as pgx gives them (text as string, integers as
// int64) and as lib/pq does (text as []byte).
func TestParse(t *testing.T) {
	replica := []driver.Value{true, "0/3000000", []byte("0/3000100"), true, int64(3), "7329", false,
		[]byte("streaming r1"), "300ms", true, "10.0.0.2", int64(5432), int64(1700000000000000), int64(4242)}
	a, err := Parse(replica)
	if err != nil {
		t.Fatal(err)
	}
	want := Answer{Replica: true, LSN: 0x3000000, Receive: 0x3000100, Paused: true, Timeline: 3,
		ApplyDelay: 300 * time.Millisecond, Receiver: "streaming", AppName: "r1", StatsVisible: true,
		Server: Server{Sysid: 7329, Addr: "10.0.0.2", Port: 5432, Started: 1700000000000000}, PID: 4242}
	if !reflect.DeepEqual(a, want) {
		t.Errorf("replica:\n got %+v\nwant %+v", a, want)
	}

	// A role without pg_read_all_stats sees a running receiver as " ".
	hidden := append([]driver.Value(nil), replica...)
	hidden[7], hidden[9] = " ", false
	if a, err := Parse(hidden); err != nil || !a.ReceiverHidden || a.Receiver != "" || a.StatsVisible {
		t.Errorf("hidden receiver: %+v, %v", a, err)
	}

	// A primary's standbys, and its sysid as the text of an unsigned value
	// past int64; a light probe's NULL sysid reads as 0.
	primary := []driver.Value{false, "16/B374D848", "", false, int64(1), "18446744073709551615", true,
		"r1=sync,r2=async", "", false, "", int64(5432), int64(1), nil}
	a, err = Parse(primary)
	if err != nil {
		t.Fatal(err)
	}
	if a.Replica || a.LSN != 0x16_B374D848 || a.Server.Sysid != 1<<64-1 || !a.AsyncDefault || a.PID != 0 ||
		!reflect.DeepEqual(a.SyncStates, map[string]string{"r1": "sync", "r2": "async"}) {
		t.Errorf("primary: %+v", a)
	}
	primary[5], primary[7] = nil, ""
	if a, err := Parse(primary); err != nil || a.Server.Sysid != 0 || a.SyncStates != nil {
		t.Errorf("light primary: %+v, %v", a, err)
	}

	for i, bad := range map[int]driver.Value{1: "0/", 2: "x", 4: "one", 5: "-", 8: "1x", 11: "port"} {
		row := append([]driver.Value(nil), replica...)
		row[i] = bad
		if _, err := Parse(row); err == nil {
			t.Errorf("column %d = %q accepted", i, bad)
		}
	}
}
