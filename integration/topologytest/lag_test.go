package topologytest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
)

// TestLagAccuracy: with recovery_min_apply_delay = 500ms on replica 1 and a
// write every 20 ms, the connector's time lag of replica 1 is within ±20 %
// of 500 ms at every sample, and replica 2's stays small. Run with the
// default monitor interval and a fast one, so a failure tells sampling
// resolution from a wrong method.
func TestLagAccuracy(t *testing.T) {
	const (
		delay    = 500 * time.Millisecond
		tol      = delay / 5 // ±20 %
		smallLag = 100 * time.Millisecond
	)
	for _, tc := range []struct {
		name     string
		interval time.Duration // the monitor's
		params   []string
	}{
		{"default_interval", 250 * time.Millisecond, nil},
		{"interval_50ms", 50 * time.Millisecond, []string{"tuning_monitor_interval=50ms"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, cn := open(t, cluster, tc.params...)
			ctx := testCtx(t, 60*time.Second)
			tbl := newTable(t, cluster)
			awaitCaughtUp(t, ctx, cluster, cn)
			setApplyDelay(t, cluster, 1, delay)
			w := startWriter(t, db, tbl, 20*time.Millisecond)

			// Warm-up: the replica's startup process takes the new delay
			// at some point after the reload (later on a loaded machine),
			// and the lag then fills over one delay; measure from when it
			// has.
			wctx, cancel := within(ctx, 10*time.Second)
			defer cancel()
			if err := waitFor(wctx, "replica 1's lag to fill", func() (bool, string) {
				ns := status(t, cn, cluster, 1)
				return ns.LagTime >= delay-tol, describe(ns)
			}); err != nil {
				t.Fatal(err)
			}

			type sample struct {
				at         time.Time
				lag1, lag2 time.Duration
			}
			var samples []sample
			end := time.Now().Add(3 * time.Second)
			for time.Now().Before(end) {
				n1, n2 := status(t, cn, cluster, 1), status(t, cn, cluster, 2)
				samples = append(samples, sample{time.Now(), n1.LagTime, n2.LagTime})
				time.Sleep(50 * time.Millisecond)
			}
			w.stop(t)

			// The method is exact only while the primary writes steadily:
			// a replica waiting on a commit has replayed everything before
			// it, and the monitor interpolates between its primary samples,
			// so a pause of the writer (a loaded machine) shortens the
			// lag by up to the pause. Judge replica 1 on the samples whose
			// window saw no pause longer than half the tolerance.
			var lag1, lag2, steady []time.Duration
			var bad1, bad2 []string
			var worstGap time.Duration
			for _, s := range samples {
				lag1, lag2 = append(lag1, s.lag1), append(lag2, s.lag2)
				if s.lag2 > smallLag {
					bad2 = append(bad2, s.lag2.Round(time.Millisecond).String())
				}
				gap := w.maxGap(s.at.Add(-delay-3*tc.interval), s.at)
				worstGap = max(worstGap, gap)
				if gap > tol/2 {
					continue
				}
				steady = append(steady, s.lag1)
				if s.lag1 < delay-tol || s.lag1 > delay+tol {
					bad1 = append(bad1, s.lag1.Round(time.Millisecond).String())
				}
			}
			t.Logf("replica 1 (apply delay %v) LagTime: %s", delay, durStats(lag1))
			t.Logf("replica 2 (no delay) LagTime: %s", durStats(lag2))
			t.Logf("writer: longest pause %v; %d of %d samples with a steady writer", worstGap.Round(time.Millisecond), len(steady), len(samples))
			if len(steady) < len(samples)/2 {
				t.Fatalf("the writer paused for more than %v around %d of %d samples (longest %v): the machine is too loaded to measure lag to ±%v",
					tol/2, len(samples)-len(steady), len(samples), worstGap, tol)
			}
			// The 5th to 95th percentiles must lie within ±20 %: a sample
			// taken when the replica sits exactly on a primary sample can
			// be off by up to one monitor interval (the monitor cannot know
			// when, within the interval, the primary moved past it).
			slices.Sort(steady)
			p5, p50, p95 := steady[len(steady)*5/100], steady[len(steady)/2], steady[len(steady)*95/100]
			if len(bad1) > 0 {
				t.Logf("replica 1: %d of %d steady samples outside %v±%v: %v", len(bad1), len(steady), delay, tol, head(bad1))
			}
			if p5 < delay-tol || p95 > delay+tol || p50 < delay-tol/2 || p50 > delay+tol/2 {
				t.Errorf("replica 1: p5 %v, median %v, p95 %v; want p5..p95 within %v±%v and the median within ±%v", p5, p50, p95, delay, tol, tol/2)
			}
			if len(bad2) > 0 {
				t.Errorf("replica 2: %d of %d samples above %v although it replays within milliseconds: %v",
					len(bad2), len(lag2), smallLag, head(bad2))
			}
		})
	}
}

// TestIdlePrimaryLag: with no writes and caught-up replicas the time lag
// stays near zero at every sample (the now() - pg_last_xact_replay_timestamp()
// measure would grow without bound). 10 s, or the minute with
// PGREPLICA_LONG=1.
func TestIdlePrimaryLag(t *testing.T) {
	// An idle primary still writes a little WAL (checkpoints, running-xacts
	// records); on a loaded machine a replica may take up to a probe
	// interval to replay it. The lie this guards against grows without
	// bound.
	const near = 250 * time.Millisecond
	watch := 10 * time.Second
	if longMode() {
		watch = time.Minute
	}
	_, cn := open(t, cluster)
	ctx := testCtx(t, watch+60*time.Second)
	awaitCaughtUp(t, ctx, cluster, cn)

	var lags [3][]time.Duration
	var maxBytes [3]uint64
	var bad []string
	start := time.Now()
	for time.Since(start) < watch {
		for i := 1; i < cluster.Len(); i++ {
			ns := status(t, cn, cluster, i)
			lags[i] = append(lags[i], ns.LagTime)
			maxBytes[i] = max(maxBytes[i], ns.LagBytes)
			if ns.LagTime >= near {
				bad = append(bad, time.Since(start).Round(time.Millisecond).String()+": "+describe(ns))
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i := 1; i < cluster.Len(); i++ {
		t.Logf("replica %d over %v idle: LagTime %s; max LagBytes %d", i, watch, durStats(lags[i]), maxBytes[i])
	}
	if len(bad) > 0 {
		t.Errorf("%d samples with LagTime >= %v on an idle primary: %v", len(bad), near, head(bad))
	}
}

// TestPausedReplicaLagGrows: while replay is paused on replica 1 and writes
// continue, its LagTime and LagBytes never go down and the time lag grows
// with the wall clock; after ResumeReplay both return to about zero.
func TestPausedReplicaLagGrows(t *testing.T) {
	db, cn := open(t, cluster)
	ctx := testCtx(t, 60*time.Second)
	tbl := newTable(t, cluster)
	awaitCaughtUp(t, ctx, cluster, cn)
	pauseReplay(t, cluster, 1)
	w := startWriter(t, db, tbl, 20*time.Millisecond)

	wctx, cancel := within(ctx, 5*time.Second)
	defer cancel()
	if err := waitFor(wctx, "the paused replica to show lag", func() (bool, string) {
		ns := status(t, cn, cluster, 1)
		return ns.LagTime > 0 && ns.LagBytes > 0, describe(ns)
	}); err != nil {
		t.Fatal(err)
	}

	type sample struct {
		at time.Time
		ns pgreplica.NodeStatus
	}
	var samples []sample
	for range 30 {
		samples = append(samples, sample{time.Now(), status(t, cn, cluster, 1)})
		time.Sleep(100 * time.Millisecond)
	}
	for i := 1; i < len(samples); i++ {
		p, s := samples[i-1].ns, samples[i].ns
		if s.LagTime < p.LagTime {
			t.Errorf("sample %d: LagTime went down from %v to %v while paused", i, p.LagTime, s.LagTime)
		}
		if s.LagBytes < p.LagBytes {
			t.Errorf("sample %d: LagBytes went down from %d to %d while paused", i, p.LagBytes, s.LagBytes)
		}
		if !s.ReplayPaused {
			t.Errorf("sample %d: ReplayPaused false: %s", i, describe(s))
		}
	}
	first, last := samples[0], samples[len(samples)-1]
	wall := last.at.Sub(first.at)
	grew := last.ns.LagTime - first.ns.LagTime
	t.Logf("paused replica: LagTime %v → %v (+%v) over %v of wall time; LagBytes %d → %d",
		first.ns.LagTime.Round(time.Millisecond), last.ns.LagTime.Round(time.Millisecond),
		grew.Round(time.Millisecond), wall.Round(time.Millisecond), first.ns.LagBytes, last.ns.LagBytes)
	if d := grew - wall; d < -300*time.Millisecond || d > 300*time.Millisecond {
		t.Errorf("LagTime grew by %v over %v of wall time, want about the same (±300ms)", grew, wall)
	}
	if last.ns.LagBytes <= first.ns.LagBytes {
		t.Errorf("LagBytes did not grow while writes continued: %d → %d", first.ns.LagBytes, last.ns.LagBytes)
	}

	resumed := time.Now()
	if err := cluster.ResumeReplay(ctx, 1); err != nil {
		t.Fatal(err)
	}
	wctx, cancel = within(ctx, 3*time.Second)
	defer cancel()
	if err := waitFor(wctx, "replica 1's lag to return to ~0 with writes going on", func() (bool, string) {
		ns := status(t, cn, cluster, 1)
		return ns.LagTime < 50*time.Millisecond && ns.LagBytes < 64<<10, describe(ns)
	}); err != nil {
		t.Error(err)
	}
	t.Logf("lag back under 50ms / 64kB %v after ResumeReplay was called", time.Since(resumed).Round(time.Millisecond))
	w.stop(t)
	wctx, cancel = within(ctx, 3*time.Second)
	defer cancel()
	if err := waitFor(wctx, "replica 1's lag to reach zero once writes stop", func() (bool, string) {
		ns := status(t, cn, cluster, 1)
		return ns.LagTime == 0 && ns.LagBytes == 0, describe(ns)
	}); err != nil {
		t.Error(err)
	}
}

// TestSparseWritesLag: with a write every 300 ms (sparser than the monitor
// polls) both replicas replay each write within milliseconds, so their
// time lag stays near zero and eventual reads under pgreplica_max_lag=100ms
// never leave the replicas. Lag is judged by distinct probe answers: a
// phantom lag shows after every write, while a CI machine whose two cores
// the other test packages keep busy can delay one replay (the monitor then
// reports that real lag, for as long as the next probe is late).
func TestSparseWritesLag(t *testing.T) {
	const near = 50 * time.Millisecond
	db, cn := open(t, cluster, "pgreplica_max_lag=100ms")
	ctx := testCtx(t, 60*time.Second)
	tbl := newTable(t, cluster)
	awaitCaughtUp(t, ctx, cluster, cn)
	w := startWriter(t, db, tbl, 300*time.Millisecond)
	ev := pgreplica.WithEventual(ctx)

	var lags [3][]time.Duration
	var bad []string
	// events are the distinct lagging answers of each replica (its
	// replayed position and lag: a late probe repeats one).
	events := [3]map[string]bool{{}, {}, {}}
	seen := map[int]int{}
	excused := 0 // reads on the primary while every replica reported a lag over the bound
	end := time.Now().Add(5 * time.Second)
	for time.Now().Before(end) {
		allOver := true
		for i := 1; i < cluster.Len(); i++ {
			ns := status(t, cn, cluster, i)
			lags[i] = append(lags[i], ns.LagTime)
			if ns.LagTime >= near {
				bad = append(bad, describe(ns))
				events[i][fmt.Sprintf("%s %v", ns.LSN, ns.LagTime)] = true
			}
			allOver = allOver && ns.LagTime > 100*time.Millisecond
		}
		n, err := servedBy(ev, db, cluster)
		if err != nil {
			t.Fatal(err)
		}
		seen[n]++
		if n == 0 && allOver {
			excused++ // the one real lag a replica may show (above): the primary rightly served it
		}
		time.Sleep(50 * time.Millisecond)
	}
	w.stop(t)
	for i := 1; i < cluster.Len(); i++ {
		t.Logf("replica %d under a write every 300ms: LagTime %s", i, durStats(lags[i]))
	}
	t.Logf("eventual reads with pgreplica_max_lag=100ms: %v (node: count); %d writes", seen, w.ok.Load())
	if len(bad) > 0 {
		t.Logf("%d samples with LagTime >= %v: %v", len(bad), near, head(bad))
	}
	for i := 1; i < cluster.Len(); i++ {
		if len(events[i]) > 1 {
			t.Errorf("replica %d answered %d probes with LagTime >= %v although it replays each write within milliseconds", i, len(events[i]), near)
		}
	}
	if seen[0] > excused {
		t.Errorf("%d of %d eventual reads went to the primary (%d while every replica reported a lag over the bound): a caught-up replica was taken to be over pgreplica_max_lag=100ms",
			seen[0], seen[0]+seen[1]+seen[2], excused)
	}
}
