package tuning

import (
	"strings"
	"testing"
	"time"
)

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		name, dsn, rest string
		want            Knobs
	}{
		{"url without knobs", "postgres://h1,h2/db?sslmode=disable&pgreplica_wait_budget=1s",
			"postgres://h1,h2/db?sslmode=disable&pgreplica_wait_budget=1s", Knobs{}},
		{"url without a query", "postgres://h1/db", "postgres://h1/db", Knobs{}},
		{"url, knobs among the rest",
			"postgres://h1,h2/db?sslmode=disable&tuning_monitor_interval=1h&pgreplica_driver=pq&tuning_hedge_delay=-1s" +
				"&tuning_max_hedge_percent=100&tuning_wait_after_write=true&application_name=a%20b",
			"postgres://h1,h2/db?sslmode=disable&pgreplica_driver=pq&application_name=a%20b",
			Knobs{MonitorInterval: time.Hour, HedgeDelay: -time.Second, MaxHedgePercent: 100, WaitAfterWrite: true}},
		{"url, knobs only", "POSTGRESQL://h1/db?tuning_health_check_after=-1s&tuning_probe_timeout=300ms",
			"POSTGRESQL://h1/db", Knobs{HealthCheckAfter: -time.Second, ProbeTimeout: 300 * time.Millisecond}},
		{"url, escaped value", "postgres://h1/db?tuning_idle_monitor_interval=%31m30s",
			"postgres://h1/db", Knobs{IdleMonitorInterval: 90 * time.Second}},
		{"key/value without knobs", "host=h1 dbname='it''s'", "host=h1 dbname='it''s'", Knobs{}},
		{"key/value, knobs among the rest",
			"host=h1,h2 port=5432,5433 tuning_monitor_interval=50ms password='a b\\'c' tuning_idle_monitor_interval = 1h application_name=x",
			`host=h1,h2 port=5432,5433 password='a b\'c' application_name=x`,
			Knobs{MonitorInterval: 50 * time.Millisecond, IdleMonitorInterval: time.Hour}},
		{"key/value, knobs only", "tuning_wait_after_write=1", "", Knobs{WaitAfterWrite: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rest, k, err := Split(tc.dsn)
			if err != nil || rest != tc.rest || k != tc.want {
				t.Errorf("Split(%q) = %q, %+v, %v; want %q, %+v", tc.dsn, rest, k, err, tc.rest, tc.want)
			}
		})
	}
}

func TestSplitRefuses(t *testing.T) {
	for dsn, want := range map[string]string{
		"postgres://h1/db?tuning_monitor_interval=fast": "tuning_monitor_interval",
		"postgres://h1/db?tuning_no_such_knob=1":        "unknown parameter tuning_no_such_knob",
		"postgres://h1/db?tuning_probe_timeout=1s%2":    "invalid URL escape",
		"host=h1 tuning_max_hedge_percent=many":         "tuning_max_hedge_percent",
		"host=h1 tuning_wait_after_write=replica":       "tuning_wait_after_write",
		"host=h1 tuning_hedge_delay='-1s":               "unterminated",
	} {
		if rest, k, err := Split(dsn); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Split(%q) = %q, %+v, %v; want an error naming %s", dsn, rest, k, err, want)
		}
	}
}
