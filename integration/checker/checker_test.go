package checker

import (
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica/integration"
)

var cluster *integration.Cluster

func TestMain(m *testing.M) {
	os.Exit(integration.Main(m, integration.Options{Replicas: 2}, &cluster))
}

// DurationEnv turns on the long mode with the given duration for each run,
// e.g. PGREPLICA_CHECKER_DURATION=5m; -checker.duration overrides it.
const DurationEnv = "PGREPLICA_CHECKER_DURATION"

var (
	longMode    = flag.Bool("checker.long", false, "run the long checker: 2m per target, and pgreplica with lib/pq too")
	runDuration = flag.Duration("checker.duration", 0, "duration of each checker run (default 9-20s, 2m in the long mode)")
)

// shortRun is the short mode's duration of a target's run: most time for
// the run most likely to catch a driver bug, least for the naive router,
// which fails hundreds of times a second. Each is long enough for a
// replica to be killed and restarted once it is older than the run's table
// (see Faults.KillApplyDelay), and for the window after it. With setup and
// catching up between runs they stay within a minute.
func shortRun(t Target) time.Duration {
	switch t {
	case TargetSession:
		return 20 * time.Second
	case TargetNaive:
		return 9 * time.Second
	}
	return 12 * time.Second
}

// minKillRun is the shortest run sure to have a replica killed and
// restarted (the first kill waits for Faults.KillApplyDelay).
const minKillRun = 9 * time.Second

// longRun is each run's duration in the long mode.
const longRun = 2 * time.Minute

// settings returns the duration of each run of target t and whether the
// long mode is on: -checker.long, or a duration in $PGREPLICA_CHECKER_DURATION.
// -checker.duration sets the duration of every run in either mode.
func settings(t *testing.T, target Target) (time.Duration, bool) {
	t.Helper()
	d, long := shortRun(target), *longMode
	if long {
		d = longRun
	}
	if env := os.Getenv(DurationEnv); env != "" {
		v, err := time.ParseDuration(env)
		if err != nil || v <= 0 {
			t.Fatalf("%s=%q: want a positive duration such as 5m", DurationEnv, env)
		}
		d, long = v, true
	}
	if *runDuration > 0 {
		d = *runDuration
	}
	return d, long
}

// TestConsistency runs the workload through pgreplica (a Session per
// workload session; the process default for reads of one's own rows; the
// pgx-native handle with a Session) and
// through a naive router, under injected lag and paused replay, with
// replicas killed and restarted so that they come back behind what they
// served. pgreplica must show no violation; the naive router must show
// some, also across a restart, which proves the checker can fail.
func TestConsistency(t *testing.T) {
	cluster.Need(t)
	_, long := settings(t, TargetSession)
	runs := []Options{{Target: TargetSession}, {Target: TargetProcess}, {Target: TargetProcess, Names: true}, {Target: TargetPgx}, {Target: TargetNaive}}
	if long {
		runs = append(runs, Options{Target: TargetSession, Driver: "pq"}, Options{Target: TargetProcess, Driver: "pq"})
	}
	for i := range runs {
		runs[i].Faults.KillRestart = true
	}
	var reports []*Report
	t.Cleanup(func() {
		var b strings.Builder
		if err := WriteTable(&b, reports...); err != nil {
			t.Error(err)
		}
		t.Log("consistency checker report (wait quantiles are histogram bucket bounds):\n" + b.String())
	})
	// The kill fault proves something only if some replica came back
	// behind what it had served (see kill.go).
	t.Cleanup(func() {
		restarts, behind := 0, 0
		for _, rep := range reports {
			restarts += len(rep.Faults.Restarts)
			behind += rep.RestartsBehind()
		}
		if restarts > 0 && behind == 0 {
			t.Errorf("none of the %d restarts came back behind what the replica had replayed before the kill: the kill fault tests nothing", restarts)
		}
	})
	for _, o := range runs {
		o.Duration, _ = settings(t, o.Target)
		o.Logf = t.Logf
		name := string(o.Target)
		if o.Driver != "" {
			name += "/" + o.Driver
		}
		if o.Names {
			name += "/names"
		}
		t.Run(name, func(t *testing.T) {
			rep, err := Run(t.Context(), cluster, o)
			if rep != nil {
				reports = append(reports, rep)
				var b strings.Builder
				rep.WriteDetails(&b, 10)
				t.Log(b.String())
			}
			if err != nil {
				t.Fatal(err)
			}
			if rep.Reads == 0 || rep.Writes == 0 {
				t.Fatalf("the workload did nothing: %d writes, %d reads", rep.Writes, rep.Reads)
			}
			if len(rep.Faults.Restarts) == 0 && o.Duration >= minKillRun {
				t.Errorf("no replica was killed and restarted during the %v run", o.Duration)
			}
			if !o.Target.Pgreplica() {
				checkNaive(t, rep)
				return
			}
			if n := len(rep.Violations); n > 0 {
				t.Errorf("%d consistency violations through pgreplica (details above)", n)
			}
			if o.Target == TargetPgx {
				batches := 0
				for _, op := range rep.History.Ops {
					if op.Path == pathBatch {
						batches++
					}
				}
				if batches == 0 {
					t.Errorf("no read went through a pgx batch")
				}
				t.Logf("%d reads in pgx batches", batches)
			}
			// Reads that lost their connection to a killed replica are
			// tolerated (KillErrors); any other failure is not.
			if rep.Errors > 0 {
				t.Errorf("%d operations failed through pgreplica (first ones above)", rep.Errors)
			}
			// A router that sent every read to the primary would pass
			// trivially; pgreplica must keep using the replicas.
			if rep.ReplicaShare() == 0 {
				t.Errorf("no read was served by a replica")
			}
		})
	}
}

// checkNaive requires the naive router to break both guarantees: the
// reads follow the writes at once and the replicas lag by up to 500 ms, so
// this is not left to chance.
func checkNaive(t *testing.T, rep *Report) {
	t.Helper()
	if rep.Count(ReadYourWrites) == 0 {
		t.Errorf("the naive router showed no read-your-writes violation: the checker cannot fail")
	}
	if rep.MonotonicCount(false) == 0 {
		t.Errorf("the naive router showed no monotonic-read violation on other sessions' rows: the checker cannot fail")
	}
	if len(rep.Faults.Restarts) > 0 && rep.RestartRegressions() == 0 {
		t.Errorf("the naive router showed no monotonic-read violation on a replica restarted between the two reads: the checker cannot catch a replica that comes back behind")
	}
	if n := rep.Count(Impossible); n > 0 {
		t.Errorf("%d impossible reads: the checker or the cluster is broken", n)
	}
}
