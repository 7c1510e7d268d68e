package pgreplicaprom

import (
	"reflect"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// exported says, for every field of pgreplica.Stats, where the collector
// emits it: check fails t unless the scrape fams shows s's value there.
// A field added to Stats without an entry here fails
// TestEveryStatsFieldIsExported: export it, then say where.
var exported = map[string]func(t *testing.T, fams map[string]*dto.MetricFamily, s pgreplica.Stats){
	"ReplicaReads":  counter("pgreplica_reads_total", func(s pgreplica.Stats) int64 { return s.ReplicaReads }, "route", "replica"),
	"PrimaryReads":  counter("pgreplica_reads_total", func(s pgreplica.Stats) int64 { return s.PrimaryReads }, "route", "primary"),
	"FallbackReads": counter("pgreplica_reads_total", func(s pgreplica.Stats) int64 { return s.FallbackReads }, "route", "fallback"),
	"Fallbacks": func(t *testing.T, fams map[string]*dto.MetricFamily, s pgreplica.Stats) {
		for reason, n := range s.Fallbacks {
			counter("pgreplica_read_fallbacks_total", func(pgreplica.Stats) int64 { return n }, "reason", reason)(t, fams, s)
		}
	},
	"FailedReads": func(t *testing.T, fams map[string]*dto.MetricFamily, s pgreplica.Stats) {
		for reason, n := range s.FailedReads {
			counter("pgreplica_reads_failed_total", func(pgreplica.Stats) int64 { return n }, "reason", reason)(t, fams, s)
		}
	},
	"RecentWriteReads": counter("pgreplica_reads_total", func(s pgreplica.Stats) int64 { return s.RecentWriteReads }, "route", "recent_write"),
	"FallbackRejected": counter("pgreplica_read_fallbacks_rejected_total", func(s pgreplica.Stats) int64 { return s.FallbackRejected }),
	"FallbackPeak":     gauge("pgreplica_read_fallbacks_peak", func(s pgreplica.Stats) float64 { return float64(s.FallbackPeak) }),
	"TokenedReads":     counter("pgreplica_tokened_reads_total", func(s pgreplica.Stats) int64 { return s.TokenedReads }),
	"TokenedFallbacks": counter("pgreplica_tokened_read_fallbacks_total", func(s pgreplica.Stats) int64 { return s.TokenedFallbacks }),
	// A ratio of two counters since the start: dashboards divide their
	// rates instead (doc.go shows the query).
	"TokenedFallbackRatio": func(*testing.T, map[string]*dto.MetricFamily, pgreplica.Stats) {},
	"Wait": func(t *testing.T, fams map[string]*dto.MetricFamily, s pgreplica.Stats) {
		h := find(t, fams, "pgreplica_replica_wait_seconds").GetHistogram()
		if h.GetSampleCount() != uint64(s.Wait.Count) || h.GetSampleSum() != s.Wait.Sum.Seconds() || len(h.GetBucket()) != len(s.Wait.Buckets) {
			t.Errorf("Wait: histogram count %d sum %v buckets %d, want %d, %v, %d", h.GetSampleCount(), h.GetSampleSum(), len(h.GetBucket()),
				s.Wait.Count, s.Wait.Sum.Seconds(), len(s.Wait.Buckets))
		}
	},
	"LSNCaptures":      counter("pgreplica_lsn_captures_total", func(s pgreplica.Stats) int64 { return s.LSNCaptures }),
	"ConflictRetries":  counter("pgreplica_read_retries_total", func(s pgreplica.Stats) int64 { return s.ConflictRetries }, "kind", "conflict"),
	"ReadOnlyRetries":  counter("pgreplica_read_retries_total", func(s pgreplica.Stats) int64 { return s.ReadOnlyRetries }, "kind", "read_only"),
	"ConnLostRetries":  counter("pgreplica_read_retries_total", func(s pgreplica.Stats) int64 { return s.ConnLostRetries }, "kind", "conn_lost"),
	"ConflictsAvoided": counter("pgreplica_read_conflicts_avoided_total", func(s pgreplica.Stats) int64 { return s.ConflictsAvoided }),
	// Hedges is what won and lost together.
	"Hedges":                 counter("pgreplica_read_hedges_total", func(s pgreplica.Stats) int64 { return s.Hedges - s.HedgeWins }, "outcome", "lost"),
	"HedgeWins":              counter("pgreplica_read_hedges_total", func(s pgreplica.Stats) int64 { return s.HedgeWins }, "outcome", "won"),
	"HedgesDenied":           counter("pgreplica_read_hedges_total", func(s pgreplica.Stats) int64 { return s.HedgesDenied }, "outcome", "denied"),
	"PrimaryVisibilityWaits": counter("pgreplica_primary_visibility_waits_total", func(s pgreplica.Stats) int64 { return s.PrimaryVisibilityWaits }),
	"ReplayChecks":           counter("pgreplica_replay_checks_total", func(s pgreplica.Stats) int64 { return s.ReplayChecks }, "where", "before"),
	"FlightChecks":           counter("pgreplica_replay_checks_total", func(s pgreplica.Stats) int64 { return s.FlightChecks }, "where", "in_flight"),
	"Nodes": func(t *testing.T, fams map[string]*dto.MetricFamily, s pgreplica.Stats) {
		n := s.Nodes[0]
		gauge("pgreplica_node_lag_bytes", func(pgreplica.Stats) float64 { return float64(n.LagBytes) }, "node", n.Addr, "zone", n.Zone)(t, fams, s)
		gauge("pgreplica_node_lag_seconds", func(pgreplica.Stats) float64 { return n.LagTime.Seconds() }, "node", n.Addr, "zone", n.Zone)(t, fams, s)
		gauge("pgreplica_node_rtt_seconds", func(pgreplica.Stats) float64 { return n.RTT.Seconds() }, "node", n.Addr, "zone", n.Zone)(t, fams, s)
	},
}

// TestEveryStatsFieldIsExported: every field of pgreplica.Stats, each
// given a value of its own, shows in a scrape where exported says.
func TestEveryStatsFieldIsExported(t *testing.T) {
	s := distinctStats()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(newCollector(func() pgreplica.Stats { return s }))
	got, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	fams := map[string]*dto.MetricFamily{}
	for _, f := range got {
		fams[f.GetName()] = f
	}
	st := reflect.TypeFor[pgreplica.Stats]()
	for i := range st.NumField() {
		name := st.Field(i).Name
		check, ok := exported[name]
		if !ok {
			t.Errorf("Stats.%s is exported by no metric of the collector (or the test does not say which)", name)
			continue
		}
		check(t, fams, s)
	}
	for name := range exported {
		if _, ok := st.FieldByName(name); !ok {
			t.Errorf("exported names Stats.%s, which does not exist", name)
		}
	}
}

// distinctStats is a Stats whose every counter has a value no other has.
func distinctStats() pgreplica.Stats {
	var s pgreplica.Stats
	v := reflect.ValueOf(&s).Elem()
	next := int64(1001)
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Int64 {
			f.SetInt(next)
			next += 13
		}
	}
	s.Hedges = s.HedgeWins + 5 // never fewer than wins
	reasons := func() map[string]int64 {
		m := map[string]int64{}
		for _, r := range []string{pgreplica.ReasonTimeout, pgreplica.ReasonNoReplica, pgreplica.ReasonConflict} {
			m[r] = next
			next += 13
		}
		return m
	}
	s.Fallbacks, s.FailedReads = reasons(), reasons()
	s.Wait = pgreplica.WaitStats{Count: 9, Sum: 1500 * time.Millisecond,
		Buckets: []pgreplica.Bucket{{UpperBound: time.Millisecond, Count: 4}, {UpperBound: time.Second, Count: 9}}}
	s.Nodes = []pgreplica.NodeStatus{{Addr: "db1:5432", Zone: "a", Role: "replica", LagBytes: 77, LagTime: 3 * time.Second, RTT: 2 * time.Millisecond}}
	return s
}

func counter(name string, value func(pgreplica.Stats) int64, labels ...string) func(*testing.T, map[string]*dto.MetricFamily, pgreplica.Stats) {
	return func(t *testing.T, fams map[string]*dto.MetricFamily, s pgreplica.Stats) {
		t.Helper()
		m := find(t, fams, name, labels...)
		if m != nil && m.GetCounter().GetValue() != float64(value(s)) {
			t.Errorf("%s%v = %v, want %d", name, labels, m.GetCounter().GetValue(), value(s))
		}
	}
}

func gauge(name string, value func(pgreplica.Stats) float64, labels ...string) func(*testing.T, map[string]*dto.MetricFamily, pgreplica.Stats) {
	return func(t *testing.T, fams map[string]*dto.MetricFamily, s pgreplica.Stats) {
		t.Helper()
		m := find(t, fams, name, labels...)
		if m != nil && m.GetGauge().GetValue() != value(s) {
			t.Errorf("%s%v = %v, want %v", name, labels, m.GetGauge().GetValue(), value(s))
		}
	}
}

// find returns the metric of family name with the label pairs given.
func find(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) *dto.Metric {
	t.Helper()
	f := fams[name]
	if f == nil {
		t.Errorf("no metric %s", name)
		return nil
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if have[labels[i]] != labels[i+1] {
				continue next
			}
		}
		return m
	}
	t.Errorf("no %s with labels %v", name, labels)
	return nil
}
