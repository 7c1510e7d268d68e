package probe

import (
	"database/sql/driver"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// FuzzParse: whatever a server (or something posing as one) answers to
// the probe, Parse does not panic, fails only with its own errors, reads
// text alike as string (pgx) and []byte (lib/pq), and keeps what it read.
func FuzzParse(f *testing.F) {
	f.Add(true, "0/3000000", "0/3000100", false, "1", "7", false, "streaming r1", "0", true, "10.0.0.2", "5432", "1700000000000000", "4242")
	f.Add(true, "0/3000000", "", true, "", "", false, " ", "2min", false, "", "0", "-1", "")
	f.Add(false, "16/B374D848", "", false, "1", "18446744073709551615", true, "r1=sync,r2=potential,=", "", false, "::1", "5432", "1", "1")
	f.Add(false, "0/", "1//2", false, "x", "-", false, "a=b=c,,d", "3 parsecs", false, "", "port", "0x1", "-7")
	f.Fuzz(func(t *testing.T, replica bool, lsn, receive string, paused bool, tl, sysid string, async bool,
		info, delay string, visible bool, addr, port, started, pid string) {
		text := []string{1: lsn, 2: receive, 4: tl, 5: sysid, 7: info, 8: delay, 10: addr, 11: port, 12: started, 13: pid}
		row := func(asBytes bool) []driver.Value {
			vals := make([]driver.Value, Columns)
			vals[0], vals[3], vals[6], vals[9] = replica, paused, async, visible
			for i, s := range text {
				switch {
				case i == 0 || i == 3 || i == 6 || i == 9:
				case s == "" && i != 7 && i != 10:
					vals[i] = nil // NULL where the probe may answer one
				case asBytes:
					vals[i] = []byte(s)
				default:
					vals[i] = s
				}
			}
			return vals
		}
		a, err := Parse(row(false))
		b, errb := Parse(row(true))
		if fmt.Sprint(err) != fmt.Sprint(errb) || !reflect.DeepEqual(a, b) {
			t.Fatalf("string and []byte read differently:\n%+v, %v\n%+v, %v", a, err, b, errb)
		}
		if err != nil {
			if msg := err.Error(); !strings.HasPrefix(msg, errLSN) && !strings.HasPrefix(msg, "probe: ") {
				t.Fatalf("error %q is not the probe's", msg)
			}
			if !reflect.DeepEqual(a, Answer{}) {
				t.Fatalf("failed (%v) but answered %+v", err, a)
			}
			return
		}
		if want, _ := ParseLSN(lsn); lsn != "" && a.LSN != want {
			t.Fatalf("LSN %q read as %X", lsn, a.LSN)
		}
		if a.Replica != replica || a.Server.Addr != addr || a.StatsVisible != visible {
			t.Fatalf("answer %+v from replica=%v addr=%q visible=%v", a, replica, addr, visible)
		}
		switch {
		case replica && a.Receiver+" "+a.AppName != info && a.Receiver != info:
			t.Fatalf("receiver %q, application %q from %q", a.Receiver, a.AppName, info)
		case replica && (a.SyncStates != nil || a.ReceiverHidden != (info != "" && info[0] == ' ')):
			t.Fatalf("replica %+v from %q", a, info)
		case !replica && (a.Receiver != "" || a.AppName != "" || a.ReceiverHidden):
			t.Fatalf("primary with a receiver: %+v", a)
		}
		for k, v := range a.SyncStates {
			if !strings.Contains(info, k+"="+v) {
				t.Fatalf("standby %q=%q not in %q", k, v, info)
			}
		}
	})
}

var delaySyntax = regexp.MustCompile(`^[0-9]+(us|ms|s|min|h|d)?$`)

// FuzzParseDelay: a setting parses only in current_setting's syntax, to a
// delay that is not negative (a number past time.Duration's range is an
// error), and always when its number is small.
func FuzzParseDelay(f *testing.F) {
	for _, s := range []string{"0", "300ms", "2s", "1min", "5", "", "ms", "3 parsecs", "-1s", "+1s", "107000d", "99999999999999999999d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseDelay(s)
		valid := delaySyntax.MatchString(s)
		small := len(strings.TrimRight(s, "usminhd")) <= 5
		if err == nil && (!valid || d < 0) || err != nil && valid && small {
			t.Fatalf("parseDelay(%q) = %v, %v; syntax valid = %v", s, d, err, valid)
		}
	})
}

// FuzzParseIdentity: a new connection's identity reads as the tail of a
// probe's answer does.
func FuzzParseIdentity(f *testing.F) {
	f.Add("7", "10.0.0.2", "5432", "1700000000000000", "4242")
	f.Add("18446744073709551615", "", "0", "-1", "x")
	f.Fuzz(func(t *testing.T, sysid, addr, port, started, pid string) {
		id, err := ParseIdentity([]driver.Value{sysid, false, addr, port, started, pid})
		srv, p := id.Server, id.PID
		row := make([]driver.Value, Columns)
		row[5], row[10], row[11], row[12], row[13] = sysid, addr, port, started, pid
		a, perr := Parse(row)
		if perr == nil && err == nil && (srv != a.Server || p != a.PID) {
			t.Fatalf("identity %+v pid %d, probe %+v pid %d", srv, p, a.Server, a.PID)
		}
		// Both fail alike, but for the process id: a probe does without it.
		pidOnly := err != nil && strings.HasSuffix(err.Error(), strconv.Quote(pid))
		if err == nil && perr != nil || err != nil && perr == nil && !pidOnly {
			t.Fatalf("identity error %v, probe error %v", err, perr)
		}
	})
}

// FuzzLSNText: every LSN's text parses back to it, and text that parses
// prints back as the same LSN.
func FuzzLSNText(f *testing.F) {
	f.Add(uint64(0), "0/0")
	f.Add(uint64(0x16B374D848), "16/b374d848")
	f.Add(^uint64(0), "FFFFFFFF/00000001")
	f.Fuzz(func(t *testing.T, lsn uint64, s string) {
		text := AppendLSN(nil, lsn)
		if got, err := ParseLSN(text); err != nil || got != lsn {
			t.Fatalf("AppendLSN(%d) = %q parses as %d, %v", lsn, text, got, err)
		}
		if v, err := ParseLSN(s); err == nil {
			if again, err := ParseLSN(AppendLSN(nil, v)); err != nil || again != v {
				t.Fatalf("%q = %d prints as %q", s, v, AppendLSN(nil, v))
			}
		}
	})
}

// FuzzReachableLSN: a position moves back only from a page boundary (or
// just past its header), to less than the shortest commit before the
// boundary, and never moves again.
func FuzzReachableLSN(f *testing.F) {
	f.Add(uint64(0x1000018))
	f.Add(uint64(0x1000028))
	f.Add(uint64(0x1002028))
	f.Add(uint64(0x1002000))
	f.Add(uint64(walShortHeader))
	f.Fuzz(func(t *testing.T, lsn uint64) {
		got := ReachableLSN(lsn)
		if got != lsn {
			boundary := lsn - lsn%walPageSize
			want := boundary - (minCommitRecord - 1)
			if boundary < minCommitRecord {
				want = boundary // the start of the WAL
			}
			if got != want || lsn-boundary != 0 && lsn-boundary != walShortHeader && lsn-boundary != walLongHeader {
				t.Fatalf("ReachableLSN(%#x) = %#x: not %d bytes before the page boundary %#x", lsn, got, minCommitRecord-1, boundary)
			}
		}
		if again := ReachableLSN(got); again != got {
			t.Fatalf("ReachableLSN(%#x) = %#x, then %#x", lsn, got, again)
		}
	})
}
