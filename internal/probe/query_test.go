package probe

import (
	"strings"
	"testing"
)

// TestLightQuery: a light probe leaves out the system identifier and the
// standbys, and nothing else.
func TestLightQuery(t *testing.T) {
	for _, f := range []string{"pg_control_system", "pg_stat_replication"} {
		if !strings.Contains(FullSQL, f) || strings.Contains(LightSQL, f) {
			t.Errorf("%s: in the full probe %v, in the light one %v", f, strings.Contains(FullSQL, f), strings.Contains(LightSQL, f))
		}
	}
	if strings.Count(LightSQL, "pg_stat_wal_receiver") != strings.Count(FullSQL, "pg_stat_wal_receiver") {
		t.Error("the light probe lost the WAL receiver")
	}
}

// TestQueryEndsWithIdentity: the probe's last columns are those of
// IdentitySQL after the system identifier, which Parse reads alike.
func TestQueryEndsWithIdentity(t *testing.T) {
	_, tail, _ := strings.Cut(IdentitySQL, "\n")
	for _, q := range []string{FullSQL, LightSQL, Query(^Fn(0), false)} {
		if !strings.HasSuffix(q, "\n"+tail) {
			t.Errorf("the probe does not end with the identity columns:\n%s", q)
		}
	}
}
