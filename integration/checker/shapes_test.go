package checker

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica/integration"
)

// ShapesEnv turns on TestShapes: "1" or "all" for every shape, or a
// comma-separated list of shapes. -checker.shapes does the same.
const ShapesEnv = "PGREPLICA_SHAPES"

var (
	shapesFlag  = flag.String("checker.shapes", "", `run TestShapes through these deployment shapes ("all", or a comma-separated list); default $`+ShapesEnv)
	targetsFlag = flag.String("checker.targets", "", "TestShapes: comma-separated targets (pgreplica-session, pgreplica-process, pgreplicapgx-session, pgreplica-session/pq, naive); default all")
	proxyEvery  = flag.Duration("checker.proxy-restart", 0, "TestShapes: time between proxy restarts (default 20s; CI's short runs use less)")
)

// shapeRun is each run's duration in TestShapes unless -checker.duration
// or $PGREPLICA_CHECKER_DURATION says otherwise: long enough for a kill
// (after KillApplyDelay) and a proxy restart (after 20 s).
const shapeRun = 25 * time.Second

// TestShapes runs every target through every deployment shape (see
// Deploy): direct, PgBouncer per node in session and transaction mode,
// an HAProxy reader endpoint, and PgBouncer in front of that endpoint,
// with the checker's faults, replicas killed and restarted, and the
// proxies restarted every 20 s; it prints a table of the violations. It is
// off unless PGREPLICA_SHAPES or -checker.shapes names the shapes (it
// needs PgBouncer and HAProxy, and minutes): CI turns it on with short
// runs (.ci/run). Each
// pgreplica run must show no violation and no failed operation (beyond
// those tolerated around a kill or a proxy restart); the naive router
// must show read-your-writes violations.
func TestShapes(t *testing.T) {
	spec := *shapesFlag
	if spec == "" {
		spec = os.Getenv(ShapesEnv)
	}
	if spec == "" {
		t.Skipf("set %s=1 (or -checker.shapes=all, or a list of shapes) to run the checker through PgBouncer and HAProxy", ShapesEnv)
	}
	cluster.Need(t)
	var shapes []Shape
	if spec == "1" || spec == "all" {
		shapes = Shapes()
	} else {
		for _, name := range strings.Split(spec, ",") {
			s, err := ParseShape(strings.TrimSpace(name))
			if err != nil {
				t.Fatal(err)
			}
			shapes = append(shapes, s)
		}
	}
	runs := []Options{{Target: TargetSession}, {Target: TargetProcess}, {Target: TargetPgx}, {Target: TargetSession, Driver: "pq"}, {Target: TargetNaive}}
	if *targetsFlag != "" {
		var chosen []Options
		for _, name := range strings.Split(*targetsFlag, ",") {
			target, driver, _ := strings.Cut(strings.TrimSpace(name), "/")
			tg, err := ParseTarget(target)
			if err != nil {
				t.Fatal(err)
			}
			chosen = append(chosen, Options{Target: tg, Driver: driver})
		}
		runs = chosen
	}
	d := shapeRun
	if env := os.Getenv(DurationEnv); env != "" {
		v, err := time.ParseDuration(env)
		if err != nil || v <= 0 {
			t.Fatalf("%s=%q: want a positive duration such as 5m", DurationEnv, env)
		}
		d = v
	}
	if *runDuration > 0 {
		d = *runDuration
	}
	for i := range runs {
		runs[i].Duration = d
		runs[i].Faults.KillRestart = true
		runs[i].Faults.RestartProxies = true
		runs[i].Faults.ProxyRestartEvery = *proxyEvery
		runs[i].Logf = t.Logf
	}
	results := RunMatrix(t.Context(), cluster, shapes, runs, func(m MatrixRun) {
		name := fmt.Sprintf("%s/%s", m.Shape, m.Name())
		if m.Report != nil {
			var b strings.Builder
			m.Report.WriteDetails(&b, 5)
			t.Logf("%s:\n%s", name, b.String())
			if s := m.Report.Stats; s != nil {
				t.Logf("%s: reads on replicas %d, on the primary %d, fallen back %d %v (%d of them for a write too recent); %d waits for a replica, p50 %v, p95 %v, max %v; %d replay checks, %d in flights; retries: %d lost connection, %d conflict; %d hedges",
					name, s.ReplicaReads, s.PrimaryReads, s.FallbackReads, s.Fallbacks, s.RecentWriteReads, s.Wait.Count, s.Wait.P50, s.Wait.P95, s.Wait.Max, s.ReplayChecks, s.FlightChecks,
					s.ConnLostRetries, s.ConflictRetries, s.Hedges)
			}
		}
		if m.Err != nil {
			t.Errorf("%s: %v", name, m.Err)
		}
		judgeShapeRun(t, name, &m)
	})
	logEndpointThroughput(t, results)
	var b strings.Builder
	if err := WriteMatrix(&b, results); err != nil {
		t.Error(err)
	}
	t.Log("deployment shapes (RYW: read-your-writes violations; mono: monotonic-read violations on own and others' rows):\n" + b.String())
}

// endpointPeers pairs each endpoint shape with the per-node shape whose
// pooling it shares: the HAProxy reader endpoint with a PgBouncer per
// node in session mode (one proxy hop, a server connection per client
// connection), PgBouncer in transaction mode over the endpoint with one
// per node in transaction mode.
var endpointPeers = map[Shape]Shape{ShapeEndpoint: ShapeBouncerSession, ShapeBouncerEndpoint: ShapeBouncerTx}

// logEndpointThroughput logs, for each target run through an endpoint
// shape and through its per-node peer, the endpoint's operations as a
// share of the peer's: behind an endpoint a lagging server is to cost
// no more waits than a lagging node (a measurement, not a verdict: the
// runs are short and share a loaded machine).
func logEndpointThroughput(t *testing.T, results []MatrixRun) {
	ops := map[[2]string]int{}
	for _, m := range results {
		if m.Report != nil {
			ops[[2]string{string(m.Shape), m.Name()}] = len(m.Report.History.Ops)
		}
	}
	for _, m := range results {
		peer, ok := endpointPeers[m.Shape]
		if !ok || m.Report == nil {
			continue
		}
		if base := ops[[2]string{string(peer), m.Name()}]; base > 0 {
			t.Logf("%s/%s: %d operations, %.2f× %s's %d", m.Shape, m.Name(), len(m.Report.History.Ops),
				float64(len(m.Report.History.Ops))/float64(base), peer, base)
		}
	}
}

// judgeShapeRun applies TestConsistency's verdict to one run of the
// matrix, more leniently for the naive router: behind an endpoint it need
// not show every kind of violation.
func judgeShapeRun(t *testing.T, name string, m *MatrixRun) {
	t.Helper()
	r := m.Report
	if r == nil {
		return
	}
	if r.Reads == 0 || r.Writes == 0 {
		t.Errorf("%s: the workload did nothing: %d writes, %d reads", name, r.Writes, r.Reads)
	}
	if n := r.Count(Impossible); n > 0 {
		t.Errorf("%s: %d impossible reads: the checker, a proxy or the cluster is broken", name, n)
	}
	if !r.Target.Pgreplica() {
		if r.Count(ReadYourWrites) == 0 {
			t.Errorf("%s: the naive router showed no read-your-writes violation: the checker cannot fail", name)
		}
		return
	}
	if n := len(r.Violations); n > 0 {
		t.Errorf("%s: %d consistency violations through pgreplica", name, n)
	}
	if r.Errors > 0 {
		t.Errorf("%s: %d operations failed through pgreplica", name, r.Errors)
	}
	if r.ReplicaShare() == 0 {
		t.Errorf("%s: no read was served by a replica", name)
	}
}

// TestDeployShapes: every shape deploys in front of the cluster, names
// the expected hosts, and a short run through it with the proxy-restart
// fault restarts its proxies. It runs by default: it is quick (a second
// per shape) and judges no guarantee.
func TestDeployShapes(t *testing.T) {
	cluster.Need(t)
	for _, s := range Shapes() {
		t.Run(string(s), func(t *testing.T) {
			d, err := Deploy(t.Context(), cluster, s)
			if err != nil {
				missing := errors.Is(err, integration.ErrNoPgBouncer) || errors.Is(err, integration.ErrNoHAProxy)
				if !missing || os.Getenv(integration.RequireEnv) == "require" {
					t.Fatal(err)
				}
				t.Skip(err)
			}
			defer func() {
				if err := d.Close(); err != nil {
					t.Error(err)
				}
			}()
			hosts := strings.Count(d.DSN(), ",") + 1
			want := map[Shape]int{ShapeEndpoint: 2, ShapeBouncerEndpoint: 2}[s]
			if want == 0 {
				want = cluster.Len()
			}
			if hosts != want {
				t.Fatalf("DSN %s has %d hosts, want %d", d.DSN(), hosts, want)
			}
			o := Options{Target: TargetNaive, Sessions: 4, Duration: 1500 * time.Millisecond, Table: "checker_deploy",
				Faults: Faults{RestartProxies: true, ProxyRestartEvery: 500 * time.Millisecond}}
			rep, err := Run(t.Context(), d, o)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Shape != s {
				t.Errorf("report's shape %q, want %q", rep.Shape, s)
			}
			if rep.Reads == 0 || rep.Writes == 0 {
				t.Fatalf("the workload did nothing: %d writes, %d reads", rep.Writes, rep.Reads)
			}
			if len(d.Proxies()) > 0 && len(rep.Faults.ProxyRestarts) == 0 {
				t.Errorf("no proxy of %v was restarted", d.Proxies())
			}
			if len(d.Proxies()) == 0 && len(rep.Faults.ProxyRestarts) > 0 {
				t.Errorf("%d proxy restarts without proxies", len(rep.Faults.ProxyRestarts))
			}
			// Back at all, and soon: how soon depends on the machine's
			// load (a loaded 2-core machine took 282 ms once), which is
			// not what this test judges.
			for _, p := range rep.Faults.ProxyRestarts {
				if p.Up.IsZero() || p.Downtime > 2*time.Second {
					t.Errorf("proxy %s: restart at %s up at %s, %v down", p.Proxy, p.At, p.Up, p.Downtime)
				}
			}
			t.Logf("%d ops, %d errors, %d tolerated around %d proxy restarts; reads by node %s",
				rep.Reads+rep.Writes+rep.Errors+rep.ProxyErrors, rep.Errors, rep.ProxyErrors, len(rep.Faults.ProxyRestarts), rep.nodeShares())
		})
	}
}
