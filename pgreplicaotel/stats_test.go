package pgreplicaotel

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// points are one collection: instrument name, then the attribute pairs
// of a point ("k=v,k=v", sorted by key) to its value.
type points map[string]map[string]float64

// exported says, for every field of pgreplica.Stats, where Register's
// callback reports it: check fails t unless the collection shows s's
// value there. A field added to Stats without an entry here fails
// TestEveryStatsFieldIsExported: report it, then say where.
var exported = map[string]func(t *testing.T, got points, s pgreplica.Stats){
	"ReplicaReads":  is("pgreplica.reads", func(s pgreplica.Stats) float64 { return float64(s.ReplicaReads) }, "route=replica"),
	"PrimaryReads":  is("pgreplica.reads", func(s pgreplica.Stats) float64 { return float64(s.PrimaryReads) }, "route=primary"),
	"FallbackReads": is("pgreplica.reads", func(s pgreplica.Stats) float64 { return float64(s.FallbackReads) }, "route=fallback"),
	"Fallbacks": func(t *testing.T, got points, s pgreplica.Stats) {
		for reason, n := range s.Fallbacks {
			is("pgreplica.read.fallbacks", func(pgreplica.Stats) float64 { return float64(n) }, "reason="+reason)(t, got, s)
		}
	},
	"FailedReads": func(t *testing.T, got points, s pgreplica.Stats) {
		for reason, n := range s.FailedReads {
			is("pgreplica.read.failures", func(pgreplica.Stats) float64 { return float64(n) }, "reason="+reason)(t, got, s)
		}
	},
	"RecentWriteReads": is("pgreplica.reads", func(s pgreplica.Stats) float64 { return float64(s.RecentWriteReads) }, "route=recent_write"),
	"FallbackRejected": is("pgreplica.read.fallbacks.rejected", func(s pgreplica.Stats) float64 { return float64(s.FallbackRejected) }, ""),
	"FallbackPeak":     is("pgreplica.read.fallbacks.peak", func(s pgreplica.Stats) float64 { return float64(s.FallbackPeak) }, ""),
	"TokenedReads":     is("pgreplica.tokened_reads", func(s pgreplica.Stats) float64 { return float64(s.TokenedReads) }, ""),
	"TokenedFallbacks": is("pgreplica.tokened_read.fallbacks", func(s pgreplica.Stats) float64 { return float64(s.TokenedFallbacks) }, ""),
	// A ratio of two counters since the start: dashboards divide their
	// rates instead (doc.go says so).
	"TokenedFallbackRatio": func(*testing.T, points, pgreplica.Stats) {},
	// The API has no asynchronous histogram: the total (doc.go says where
	// the distribution is); its count is pgreplica.tokened_reads.
	"Wait":             is("pgreplica.replica.wait.time", func(s pgreplica.Stats) float64 { return s.Wait.Sum.Seconds() }, ""),
	"LSNCaptures":      is("pgreplica.lsn.captures", func(s pgreplica.Stats) float64 { return float64(s.LSNCaptures) }, ""),
	"ConflictRetries":  is("pgreplica.read.retries", func(s pgreplica.Stats) float64 { return float64(s.ConflictRetries) }, "kind=conflict"),
	"ReadOnlyRetries":  is("pgreplica.read.retries", func(s pgreplica.Stats) float64 { return float64(s.ReadOnlyRetries) }, "kind=read_only"),
	"ConnLostRetries":  is("pgreplica.read.retries", func(s pgreplica.Stats) float64 { return float64(s.ConnLostRetries) }, "kind=conn_lost"),
	"ConflictsAvoided": is("pgreplica.read.conflicts_avoided", func(s pgreplica.Stats) float64 { return float64(s.ConflictsAvoided) }, ""),
	// Hedges is what won and lost together.
	"Hedges":                 is("pgreplica.read.hedges", func(s pgreplica.Stats) float64 { return float64(s.Hedges - s.HedgeWins) }, "outcome=lost"),
	"HedgeWins":              is("pgreplica.read.hedges", func(s pgreplica.Stats) float64 { return float64(s.HedgeWins) }, "outcome=won"),
	"HedgesDenied":           is("pgreplica.read.hedges", func(s pgreplica.Stats) float64 { return float64(s.HedgesDenied) }, "outcome=denied"),
	"PrimaryVisibilityWaits": is("pgreplica.primary.visibility_waits", func(s pgreplica.Stats) float64 { return float64(s.PrimaryVisibilityWaits) }, ""),
	"ReplayChecks":           is("pgreplica.replay_checks", func(s pgreplica.Stats) float64 { return float64(s.ReplayChecks) }, "where=before"),
	"FlightChecks":           is("pgreplica.replay_checks", func(s pgreplica.Stats) float64 { return float64(s.FlightChecks) }, "where=in_flight"),
	"Nodes": func(t *testing.T, got points, s pgreplica.Stats) {
		n := s.Nodes[0]
		id := "node=" + n.Addr + ",zone=" + n.Zone
		is("pgreplica.node.lag", func(pgreplica.Stats) float64 { return float64(n.LagBytes) }, id)(t, got, s)
		is("pgreplica.node.lag_time", func(pgreplica.Stats) float64 { return n.LagTime.Seconds() }, id)(t, got, s)
		is("pgreplica.node.rtt", func(pgreplica.Stats) float64 { return n.RTT.Seconds() }, id)(t, got, s)
	},
}

// TestEveryStatsFieldIsExported: every field of pgreplica.Stats, each
// given a value of its own, shows in a collection where exported says.
func TestEveryStatsFieldIsExported(t *testing.T) {
	s := distinctStats()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	if _, err := register(func() pgreplica.Stats { return s }, mp); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := points{}
	add := func(name string, attrs attribute.Set, v float64) {
		if got[name] == nil {
			got[name] = map[string]float64{}
		}
		got[name][attrs.Encoded(attribute.DefaultEncoder())] = v
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					add(m.Name, p.Attributes, float64(p.Value))
				}
			case metricdata.Sum[float64]:
				for _, p := range d.DataPoints {
					add(m.Name, p.Attributes, p.Value)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					add(m.Name, p.Attributes, float64(p.Value))
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					add(m.Name, p.Attributes, p.Value)
				}
			}
		}
	}
	st := reflect.TypeFor[pgreplica.Stats]()
	for i := range st.NumField() {
		name := st.Field(i).Name
		check, ok := exported[name]
		if !ok {
			t.Errorf("Stats.%s is reported by no instrument (or the test does not say which)", name)
			continue
		}
		check(t, got, s)
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
	s.Wait = pgreplica.WaitStats{Count: 9, Sum: 1500 * time.Millisecond}
	s.Nodes = []pgreplica.NodeStatus{{Addr: "db1:5432", Zone: "a", Role: "replica", LagBytes: 77, LagTime: 3 * time.Second, RTT: 2 * time.Millisecond}}
	return s
}

// is checks that instrument name has a point with exactly the attributes
// attrs ("k=v,k=v", sorted by key) whose value is value(s).
func is(name string, value func(pgreplica.Stats) float64, attrs string) func(*testing.T, points, pgreplica.Stats) {
	return func(t *testing.T, got points, s pgreplica.Stats) {
		t.Helper()
		v, ok := got[name][attrs]
		switch {
		case !ok:
			t.Errorf("no point of %s with attributes {%s}", name, attrs)
		case v != value(s):
			t.Errorf("%s{%s} = %v, want %v", name, attrs, v, value(s))
		}
	}
}
