package pgreplicaoteltest

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration/exportertest"
	"github.com/pgreplica/pgreplica/pgreplicaotel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestRegister runs a workload on the real cluster (writes, replica and
// primary reads, and, with replay paused on every replica, a session read
// that falls back and one that fails) and checks what a ManualReader
// collects, then that Unregister stops the reports.
func TestRegister(t *testing.T) {
	cluster.Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db, conn := open(t)

	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	tag := attribute.String("db", "test")
	reg, err := pgreplicaotel.Register(conn, mp, pgreplicaotel.WithAttributes(tag))
	if err != nil {
		t.Fatal(err)
	}

	const writes, replicaReads, primaryReads = 5, 20, 3
	exportertest.Run(t, ctx, cluster, db, writes, replicaReads, primaryReads)
	paused := exportertest.AwaitPausedAndLagging(t, ctx, cluster, conn)
	// Nothing runs between this snapshot and the collection: the
	// collected counters must be exactly the snapshot's.
	want := conn.Stats()
	exportertest.Check(t, want, primaryReads)
	got := collect(t, ctx, reader)

	equal := func(name string, want float64, attrs ...string) {
		t.Helper()
		if v := got.value(t, name, attrs...); v != want {
			t.Errorf("%s%v = %v, want %v", name, attrs, v, want)
		}
	}
	equal("pgreplica.reads", float64(want.ReplicaReads), "route", "replica")
	equal("pgreplica.reads", float64(want.PrimaryReads), "route", "primary")
	equal("pgreplica.reads", float64(want.FallbackReads), "route", "fallback")
	for _, reason := range []string{pgreplica.ReasonTimeout, pgreplica.ReasonNoReplica, pgreplica.ReasonConflict} {
		equal("pgreplica.read.fallbacks", float64(want.Fallbacks[reason]), "reason", reason)
	}
	for _, reason := range []string{pgreplica.ReasonTimeout, pgreplica.ReasonNoReplica} {
		equal("pgreplica.read.failures", float64(want.FailedReads[reason]), "reason", reason)
	}
	equal("pgreplica.tokened_reads", float64(want.TokenedReads))
	equal("pgreplica.tokened_read.fallbacks", float64(want.TokenedFallbacks))
	equal("pgreplica.lsn.captures", float64(want.LSNCaptures))
	equal("pgreplica.replica.wait.time", want.Wait.Sum.Seconds())
	equal("pgreplica.read.retries", float64(want.ConflictRetries), "kind", "conflict")
	equal("pgreplica.read.retries", float64(want.ReadOnlyRetries), "kind", "read_only")
	equal("pgreplica.read.retries", float64(want.ConnLostRetries), "kind", "conn_lost")
	equal("pgreplica.read.hedges", float64(want.HedgeWins), "outcome", "won")
	equal("pgreplica.read.hedges", float64(want.Hedges-want.HedgeWins), "outcome", "lost")
	equal("pgreplica.read.hedges", float64(want.HedgesDenied), "outcome", "denied")
	equal("pgreplica.read.fallbacks.rejected", float64(want.FallbackRejected))
	equal("pgreplica.read.fallbacks.peak", float64(want.FallbackPeak))
	equal("pgreplica.read.conflicts_avoided", float64(want.ConflictsAvoided))
	equal("pgreplica.primary.visibility_waits", float64(want.PrimaryVisibilityWaits))
	equal("pgreplica.replay_checks", float64(want.ReplayChecks), "where", "before")
	equal("pgreplica.replay_checks", float64(want.FlightChecks), "where", "in_flight")
	for name, unit := range map[string]string{"pgreplica.reads": "{read}", "pgreplica.node.lag": "By", "pgreplica.node.lag_time": "s", "pgreplica.replica.wait.time": "s"} {
		if u := got.metrics[name].Unit; u != unit {
			t.Errorf("%s unit %q, want %q", name, u, unit)
		}
	}
	if s, ok := got.metrics["pgreplica.reads"].Data.(metricdata.Sum[int64]); !ok || !s.IsMonotonic || s.Temporality != metricdata.CumulativeTemporality {
		t.Errorf("pgreplica.reads is %T, want a monotonic cumulative int64 sum", got.metrics["pgreplica.reads"].Data)
	}

	for i := range cluster.Len() {
		id := []string{"node", "127.0.0.1:" + strconv.Itoa(cluster.Port(i)), "zone", fmt.Sprintf("z%d", i)}
		if v := got.value(t, "pgreplica.node.up", id...); v != 1 {
			t.Errorf("node %d up = %v", i, v)
		}
		if v := got.value(t, "pgreplica.node.rtt", id...); v <= 0 {
			t.Errorf("node %d rtt = %v", i, v)
		}
		if i == cluster.Primary() {
			got.value(t, "pgreplica.node.role", append(id, "role", "primary")...)
			if _, ok := got.find("pgreplica.node.lag", id...); ok {
				t.Error("lag reported for the primary")
			}
			continue
		}
		got.value(t, "pgreplica.node.role", append(id, "role", "replica")...)
		if v := got.value(t, "pgreplica.node.lag", id...); v <= 0 {
			t.Errorf("replica %d lag = %v bytes with replay paused after writes", i, v)
		}
		if v := got.value(t, "pgreplica.node.lag_time", id...); v <= 0 {
			t.Errorf("replica %d lag time = %v with replay paused after writes", i, v)
		}
		if v := got.value(t, "pgreplica.node.replay_paused", id...); v != 1 {
			t.Errorf("replica %d replay paused = %v", i, v)
		}
		if v := got.value(t, "pgreplica.node.reads_eligible", id...); v != 1 {
			t.Errorf("replica %d reads eligible = %v", i, v)
		}
	}
	for _, p := range got.points {
		if v, ok := p.attrs.Value("db"); !ok || v.AsString() != "test" {
			t.Errorf("%s %v lacks db=test", p.name, p.attrs.ToSlice())
		}
	}
	t.Logf("paused %v; collected:\n%s", paused, got)

	// Each collection reads a fresh snapshot.
	before := got.value(t, "pgreplica.reads", "route", "replica")
	var one int
	if err := db.QueryRowContext(pgreplica.WithEventual(ctx), "SELECT 1").Scan(&one); err != nil {
		t.Fatal(err)
	}
	if after := collect(t, ctx, reader).value(t, "pgreplica.reads", "route", "replica"); after != before+1 {
		t.Errorf("replica reads %v after one more read, want %v", after, before+1)
	}

	if err := reg.Unregister(); err != nil {
		t.Fatal(err)
	}
	if n := len(collect(t, ctx, reader).points); n != 0 {
		t.Errorf("%d points collected after Unregister", n)
	}
}

// open is exportertest.Open with this package's application name.
func open(t *testing.T) (*sql.DB, *pgreplica.Connector) {
	return exportertest.Open(t, cluster, "pgreplicaotel_test")
}

// collected is one collection, flattened to points.
type collected struct {
	metrics map[string]metricdata.Metrics
	points  []point
}

type point struct {
	name  string
	attrs attribute.Set
	value float64
}

func collect(t *testing.T, ctx context.Context, r *sdkmetric.ManualReader) collected {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	c := collected{metrics: map[string]metricdata.Metrics{}}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != pgreplicaotel.ScopeName {
			continue
		}
		for _, m := range sm.Metrics {
			c.metrics[m.Name] = m
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					c.points = append(c.points, point{m.Name, p.Attributes, float64(p.Value)})
				}
			case metricdata.Sum[float64]:
				for _, p := range d.DataPoints {
					c.points = append(c.points, point{m.Name, p.Attributes, p.Value})
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					c.points = append(c.points, point{m.Name, p.Attributes, float64(p.Value)})
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					c.points = append(c.points, point{m.Name, p.Attributes, p.Value})
				}
			default:
				t.Fatalf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return c
}

// find returns the point of name whose attributes include the given
// key/value pairs.
func (c collected) find(name string, attrs ...string) (point, bool) {
next:
	for _, p := range c.points {
		if p.name != name {
			continue
		}
		for i := 0; i+1 < len(attrs); i += 2 {
			if v, ok := p.attrs.Value(attribute.Key(attrs[i])); !ok || v.AsString() != attrs[i+1] {
				continue next
			}
		}
		return p, true
	}
	return point{}, false
}

func (c collected) value(t *testing.T, name string, attrs ...string) float64 {
	t.Helper()
	p, ok := c.find(name, attrs...)
	if !ok {
		t.Fatalf("no point %s%v collected", name, attrs)
	}
	return p.value
}

func (c collected) String() string {
	var b strings.Builder
	for _, p := range c.points {
		var kv []string
		for _, a := range p.attrs.ToSlice() {
			if a.Key != "db" {
				kv = append(kv, string(a.Key)+"="+a.Value.Emit())
			}
		}
		fmt.Fprintf(&b, "%s{%s} %v\n", p.name, strings.Join(kv, ","), p.value)
	}
	return b.String()
}
