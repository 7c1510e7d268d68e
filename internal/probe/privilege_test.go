package probe

import (
	"database/sql/driver"
	"strings"
	"testing"
)

func TestQuoteIdent(t *testing.T) {
	for in, want := range map[string]string{"app": "app", "App": `"App"`, `a"b`: `"a""b"`, "svc_1": "svc_1", "": "<role>"} {
		if got := QuoteIdent(in); got != want {
			t.Errorf("QuoteIdent(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestPrivileges: PrivilegeSQL asks one column per Fn, in bit order, then
// the role; ReadPrivileges reads it back.
func TestPrivileges(t *testing.T) {
	if n := strings.Count(PrivilegeSQL, "NOT ("); n != NumFns {
		t.Errorf("PrivilegeSQL asks %d privileges, want %d", n, NumFns)
	}
	if FnSetting != 1<<(NumFns-1) {
		t.Errorf("the last Fn is bit %d, want %d", FnSetting, 1<<(NumFns-1))
	}
	vals := make([]driver.Value, PrivilegeColumns)
	vals[4], vals[10], vals[NumFns] = true, true, []byte("app") // NULL and false: allowed
	denied, user := ReadPrivileges(vals)
	if denied != FnReplayLSN|FnWalReceiver || user != "app" {
		t.Errorf("ReadPrivileges = %b, %q", denied, user)
	}
	if got := denied.Names(); got != "pg_last_wal_replay_lsn(), pg_stat_wal_receiver" {
		t.Errorf("Names() = %q", got)
	}
	if got := denied.Effects(); got != "replicas' WAL receiver state and timeline are unknown" {
		t.Errorf("Effects() = %q (a required function has none)", got)
	}
}
