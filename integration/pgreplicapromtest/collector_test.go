package pgreplicapromtest

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration/exportertest"
	"github.com/pgreplica/pgreplica/pgreplicaprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestMetricsEndpoint runs a workload on the real cluster (writes, replica
// and primary reads, and, with replay paused on every replica, a session
// read that falls back and one that fails) and checks that /metrics,
// scraped while reads keep running, shows it.
func TestMetricsEndpoint(t *testing.T) {
	cluster.Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db, conn := open(t)

	col := pgreplicaprom.NewCollector(conn)
	reg := prometheus.NewPedanticRegistry() // also checks Collect against Describe
	reg.MustRegister(col)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	defer srv.Close()

	const writes, replicaReads, primaryReads = 5, 20, 3
	exportertest.Run(t, ctx, cluster, db, writes, replicaReads, primaryReads)
	paused := exportertest.AwaitPausedAndLagging(t, ctx, cluster, conn)
	want := conn.Stats()
	exportertest.Check(t, want, primaryReads)

	// Scrape while untokened reads keep running (from the first one on).
	stop, started := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			var one int
			if err := db.QueryRowContext(pgreplica.WithEventual(ctx), "SELECT 1").Scan(&one); err != nil {
				t.Errorf("background read: %v", err)
				close(started)
				return
			}
			if i == 0 {
				close(started)
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	})
	<-started
	body := scrape(t, srv.URL)
	close(stop)
	wg.Wait()

	fams := parse(t, body)
	// Nothing but the background reads ran since want was taken: every
	// other figure must be exactly the snapshot's.
	equal := func(name string, want int64, labels ...string) {
		t.Helper()
		if v := value(t, fams, name, labels...); v != float64(want) {
			t.Errorf("%s%v = %v, want %d", name, labels, v, want)
		}
	}
	if v := value(t, fams, "pgreplica_reads_total", "route", "replica"); v <= float64(want.ReplicaReads) {
		t.Errorf("replica reads %v while reads ran, want > %d", v, want.ReplicaReads)
	}
	equal("pgreplica_reads_total", want.PrimaryReads, "route", "primary")
	equal("pgreplica_reads_total", want.FallbackReads, "route", "fallback")
	for _, reason := range []string{pgreplica.ReasonTimeout, pgreplica.ReasonNoReplica} {
		equal("pgreplica_read_fallbacks_total", want.Fallbacks[reason], "reason", reason)
		equal("pgreplica_reads_failed_total", want.FailedReads[reason], "reason", reason)
	}
	equal("pgreplica_tokened_reads_total", want.TokenedReads)
	equal("pgreplica_tokened_read_fallbacks_total", want.TokenedFallbacks)
	equal("pgreplica_lsn_captures_total", want.LSNCaptures)
	equal("pgreplica_read_retries_total", want.ConflictRetries, "kind", "conflict")
	equal("pgreplica_read_retries_total", want.ReadOnlyRetries, "kind", "read_only")
	equal("pgreplica_read_retries_total", want.ConnLostRetries, "kind", "conn_lost")
	equal("pgreplica_read_hedges_total", want.HedgeWins, "outcome", "won")
	equal("pgreplica_read_hedges_total", want.Hedges-want.HedgeWins, "outcome", "lost")
	equal("pgreplica_read_hedges_total", want.HedgesDenied, "outcome", "denied")
	equal("pgreplica_read_fallbacks_rejected_total", want.FallbackRejected)
	equal("pgreplica_read_fallbacks_peak", want.FallbackPeak)
	equal("pgreplica_read_conflicts_avoided_total", want.ConflictsAvoided)
	equal("pgreplica_primary_visibility_waits_total", want.PrimaryVisibilityWaits)
	equal("pgreplica_replay_checks_total", want.ReplayChecks, "where", "before")
	equal("pgreplica_replay_checks_total", want.FlightChecks, "where", "in_flight")

	h := metric(t, fams, "pgreplica_replica_wait_seconds").GetHistogram()
	if h.GetSampleCount() != uint64(want.Wait.Count) || h.GetSampleSum() != want.Wait.Sum.Seconds() {
		t.Errorf("wait histogram: count %d sum %v, want %d and %v", h.GetSampleCount(), h.GetSampleSum(), want.Wait.Count, want.Wait.Sum.Seconds())
	}
	b := h.GetBucket() // the text format adds le="+Inf"
	if len(b) != len(want.Wait.Buckets)+1 || !math.IsInf(b[len(b)-1].GetUpperBound(), 1) || b[len(b)-1].GetCumulativeCount() != h.GetSampleCount() {
		t.Fatalf("wait buckets %v, want %d bounds and +Inf holding the count", b, len(want.Wait.Buckets))
	}
	for i, wb := range want.Wait.Buckets {
		if b[i].GetUpperBound() != wb.UpperBound.Seconds() || b[i].GetCumulativeCount() != uint64(wb.Count) {
			t.Errorf("wait bucket %d: le %v count %d, want le %v count %d", i, b[i].GetUpperBound(), b[i].GetCumulativeCount(), wb.UpperBound.Seconds(), wb.Count)
		}
	}

	for i := range cluster.Len() {
		node := "127.0.0.1:" + strconv.Itoa(cluster.Port(i))
		id := []string{"node", node, "zone", fmt.Sprintf("z%d", i)}
		if v := value(t, fams, "pgreplica_node_up", id...); v != 1 {
			t.Errorf("node %d up = %v", i, v)
		}
		if v := value(t, fams, "pgreplica_node_rtt_seconds", id...); v <= 0 {
			t.Errorf("node %d rtt = %v", i, v)
		}
		if i == cluster.Primary() {
			value(t, fams, "pgreplica_node_role", append(id, "role", "primary")...)
			if _, ok := find(fams, "pgreplica_node_lag_bytes", id...); ok {
				t.Errorf("lag reported for the primary")
			}
			continue
		}
		value(t, fams, "pgreplica_node_role", append(id, "role", "replica")...)
		if v := value(t, fams, "pgreplica_node_lag_bytes", id...); v <= 0 {
			t.Errorf("replica %d lag bytes = %v with replay paused after writes", i, v)
		}
		if v := value(t, fams, "pgreplica_node_lag_seconds", id...); v <= 0 {
			t.Errorf("replica %d lag seconds = %v with replay paused after writes", i, v)
		}
		if v := value(t, fams, "pgreplica_node_replay_paused", id...); v != 1 {
			t.Errorf("replica %d replay paused = %v", i, v)
		}
		if v := value(t, fams, "pgreplica_node_reads_eligible", id...); v != 1 {
			t.Errorf("replica %d reads eligible = %v", i, v)
		}
	}
	t.Logf("paused %v; scrape excerpt:\n%s", paused, excerpt(body))

	problems, err := testutil.CollectAndLint(col)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// TestTwoConnectorsOneRegistry: const labels keep two collectors apart.
func TestTwoConnectorsOneRegistry(t *testing.T) {
	cluster.Need(t)
	_, a := open(t)
	_, b := open(t)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(pgreplicaprom.NewCollector(a, pgreplicaprom.WithConstLabels(prometheus.Labels{"db": "a"})))
	if err := reg.Register(pgreplicaprom.NewCollector(b)); err == nil {
		t.Error("a second collector without distinguishing labels registered")
	}
	reg.MustRegister(pgreplicaprom.NewCollector(b, pgreplicaprom.WithConstLabels(prometheus.Labels{"db": "b"})))
	if n, err := testutil.GatherAndCount(reg, "pgreplica_node_up"); err != nil || n != 2*cluster.Len() {
		t.Fatalf("node_up series: %d, %v; want %d", n, err, 2*cluster.Len())
	}
	n, err := testutil.GatherAndCount(prometheusNS(t, a, "app"), "app_reads_total")
	if err != nil || n != 4 { // replica, primary, fallback, recent_write
		t.Fatalf("app_reads_total series: %d, %v; want 4", n, err)
	}
}

func prometheusNS(t *testing.T, c *pgreplica.Connector, ns string) prometheus.Gatherer {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(pgreplicaprom.NewCollector(c, pgreplicaprom.WithNamespace(ns)))
	return reg
}

// open is exportertest.Open with this package's application name.
func open(t *testing.T) (*sql.DB, *pgreplica.Connector) {
	return exportertest.Open(t, cluster, "pgreplicaprom_test")
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s\n%s", resp.Status, b)
	}
	return string(b)
}

func parse(t *testing.T, body string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// find returns the series of family name whose labels include the given
// name/value pairs.
func find(fams map[string]*dto.MetricFamily, name string, labels ...string) (*dto.Metric, bool) {
	f := fams[name]
	if f == nil {
		return nil, false
	}
next:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		return m, true
	}
	return nil, false
}

func metric(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) *dto.Metric {
	t.Helper()
	m, ok := find(fams, name, labels...)
	if !ok {
		t.Fatalf("no series %s%v in /metrics", name, labels)
	}
	return m
}

func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	m := metric(t, fams, name, labels...)
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	}
	t.Fatalf("%s is neither counter nor gauge", name)
	return 0
}

// excerpt keeps the sample lines of the scrape, without HELP and TYPE.
func excerpt(body string) string {
	var b strings.Builder
	for line := range strings.Lines(body) {
		if !strings.HasPrefix(line, "#") && !strings.Contains(line, "_bucket") {
			b.WriteString(line)
		}
	}
	return b.String()
}
