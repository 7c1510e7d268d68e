package checker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// Faults configures the fault injector. In each cycle it gives every
// replica a random apply delay, keeps it for a random part of Hold, then
// pauses replay on one replica (the replicas take turns) for a random time
// in [MinPause, MaxPause] and resumes it. The delays are drawn from
// [0, MaxApplyDelay] in odd cycles (lag spikes) and from
// [0, MaxApplyDelay/10] in even ones (the usual tens of milliseconds):
// replicas whose lags differ only a little are where a router's notion of
// "fresh enough" is tested most finely.
//
// With KillRestart, every KillEvery a cycle instead kills a replica and
// starts it again so that it comes back behind what it served before the
// kill, while some sessions sit idle across it (see kill.go and
// parking.go).
type Faults struct {
	// Off disables the injector.
	Off bool
	// PausesOnly leaves apply delays out: replay on one replica at a time
	// is paused for [MinPause, MaxPause] and resumed for [Hold/2, Hold].
	PausesOnly bool
	// MaxApplyDelay bounds recovery_min_apply_delay; default 500ms.
	MaxApplyDelay time.Duration
	// MinPause and MaxPause bound a replay pause; default 200ms and 500ms.
	MinPause, MaxPause time.Duration
	// Hold bounds how long a set of delays stays before the next pause
	// (it stays between Hold/2 and Hold); default 500ms. Every change of
	// lag opens a window in which a router's cached replica positions are
	// out of date.
	Hold time.Duration

	// KillRestart turns on the kill-and-restart fault: every KillEvery a
	// replica (the replicas take turns) is killed with SIGKILL and started
	// again after a random downtime in [0, MaxDowntime], while half of the
	// sessions keep running (none, every other kill) and the others sit
	// idle across it. Reads that fail with a lost or refused connection
	// meanwhile are tolerated (Report.KillErrors). The cluster must be
	// one whose replicas the checker may crash.
	KillRestart bool
	// KillEvery is the time from one kill to the next; default 8s. The
	// first kill comes once KillApplyDelay and a random part of Hold have
	// passed.
	KillEvery time.Duration
	// MaxDowntime bounds how long a killed replica stays down; default
	// 300ms.
	MaxDowntime time.Duration
	// KillApplyDelay is the recovery_min_apply_delay every replica gets
	// just before the kill; it decides how far behind the restarted
	// replica comes back and for how long (about KillApplyDelay minus the
	// downtime). Default 5s; it must exceed MaxDowntime.
	KillApplyDelay time.Duration

	// SyncStandby makes the first replica the primary's synchronous
	// standby and has every workload connection commit with
	// synchronous_commit = remote_apply: a commit then waits while that
	// replica's replay is paused or delayed, and the other replicas show it
	// before the primary does (visibility order on the primary is not WAL
	// order; see syncstandby.go). Not with KillRestart: every commit would
	// wait out the kill's apply delay.
	SyncStandby bool

	// RestartProxies turns on the proxy-restart fault when the run's
	// Cluster is a Deployment with proxies: every ProxyRestartEvery each
	// of its PgBouncer and HAProxy processes is stopped and started again
	// on its port, all at once, which closes every client connection
	// through them (see proxyfault.go). Operations that fail with a lost or
	// refused connection meanwhile are tolerated (Report.ProxyErrors).
	RestartProxies bool
	// ProxyRestartEvery is the time from one proxy restart to the next,
	// the first one included; default 20s.
	ProxyRestartEvery time.Duration
}

func (f Faults) withDefaults() Faults {
	if f.MaxApplyDelay == 0 {
		f.MaxApplyDelay = 500 * time.Millisecond
	}
	if f.MinPause == 0 {
		f.MinPause = 200 * time.Millisecond
	}
	if f.MaxPause == 0 {
		f.MaxPause = 500 * time.Millisecond
	}
	if f.Hold == 0 {
		f.Hold = 500 * time.Millisecond
	}
	if f.KillEvery == 0 {
		f.KillEvery = 8 * time.Second
	}
	if f.MaxDowntime == 0 {
		f.MaxDowntime = 300 * time.Millisecond
	}
	if f.KillApplyDelay == 0 {
		f.KillApplyDelay = 5 * time.Second
	}
	if f.ProxyRestartEvery == 0 {
		f.ProxyRestartEvery = 20 * time.Second
	}
	return f
}

func (f *Faults) validate() error {
	if f.MaxApplyDelay < 0 || f.MinPause < 0 || f.MaxPause < f.MinPause || f.Hold < 0 ||
		f.KillEvery < 0 || f.MaxDowntime < 0 || f.KillApplyDelay <= f.MaxDowntime || f.ProxyRestartEvery < 0 {
		return fmt.Errorf("%w: faults %+v", errBadOptions, *f)
	}
	if f.SyncStandby && f.KillRestart {
		return fmt.Errorf("%w: SyncStandby with KillRestart", errBadOptions)
	}
	return nil
}

// FaultEvent is one change the injector made.
type FaultEvent struct {
	At time.Time
	// Node is the node changed, -1 for a proxy of a Deployment.
	Node int
	// What is "delay 123ms", "pause", "resume", "kill (…)",
	// "restart after … (…)" (see Restart) or "restart of proxy …" (see
	// ProxyRestart).
	What string
}

// FaultStats counts what the injector did.
type FaultStats struct {
	DelayChanges, Pauses int
	// Restarts are the replicas killed and started again, in order.
	Restarts []Restart
	// ProxyRestarts are the restarts of a Deployment's proxies, in order.
	ProxyRestarts []ProxyRestart
	Events        []FaultEvent
}

// faultStep bounds one harness call (each waits until the server shows
// the change).
const faultStep = 10 * time.Second

// injector is the state of one run's fault injection.
type injector struct {
	ctx      context.Context // ends with the sessions
	cl       Cluster
	f        Faults
	rng      *rand.Rand
	replicas []int
	sessions int
	park     *parking
	// held maps a restarted replica to the end of the window in which it
	// is behind what it served before the kill: until then the lag cycles
	// leave it alone (a new delay would let it catch up at once).
	held map[int]time.Time
	mu   sync.Mutex // guards st.Events: delays are set on all replicas at once
	st   FaultStats
}

// injectFaults varies lag on the replicas, and kills and restarts them
// with o.Faults.KillRestart (holding some sessions idle through park),
// until ctx ends. It never leaves a replica down nor a session parked, but
// leaves the last delays and possibly a paused replica behind: restore
// undoes them.
func injectFaults(ctx context.Context, cl Cluster, o *Options, rng *rand.Rand, park *parking) (FaultStats, error) {
	f := o.Faults
	in := &injector{ctx: ctx, cl: cl, f: f, rng: rng, replicas: replicasOf(cl), held: map[int]time.Time{},
		sessions: o.Sessions, park: park}
	if f.Off || len(in.replicas) == 0 {
		return in.st, nil
	}
	// The first kill waits until the run's table is older than
	// KillApplyDelay: the restarted replica comes back without the
	// commits younger than that, and must not come back without the
	// table (or with the one of an earlier run).
	var nextKill time.Time
	if f.KillRestart {
		nextKill = time.Now().Add(f.KillApplyDelay + in.between(f.Hold/2, f.Hold))
	}
	for cycle := 0; ; cycle++ {
		if victim := in.next(len(in.st.Restarts)); f.KillRestart && !time.Now().Before(nextKill) && victim >= 0 {
			killed, err := in.killRestart(victim)
			if err != nil || ctx.Err() != nil {
				return in.st, err
			}
			nextKill = killed.Add(f.KillEvery)
			continue
		}
		maxDelay := f.MaxApplyDelay
		if cycle%2 == 0 {
			maxDelay /= 10
		}
		if !f.PausesOnly {
			if err := in.setDelays(func(int) time.Duration { return in.between(0, maxDelay) }); err != nil {
				return in.st, quiet(ctx, err)
			}
		}
		if err := in.hold(in.between(f.Hold/2, f.Hold)); err != nil {
			return in.st, nil
		}
		i := in.next(cycle)
		if i < 0 {
			continue // every replica is held after a restart
		}
		if err := in.step(ctx, i, "pause", func(ctx context.Context) error { return cl.PauseReplay(ctx, i) }); err != nil {
			return in.st, quiet(ctx, err)
		}
		in.st.Pauses++
		// Resume even when the run ends during the pause.
		held := in.hold(in.between(f.MinPause, f.MaxPause))
		if err := in.step(context.WithoutCancel(ctx), i, "resume", func(ctx context.Context) error { return cl.ResumeReplay(ctx, i) }); err != nil {
			return in.st, err
		}
		if held != nil {
			return in.st, nil
		}
	}
}

// step runs one harness call under base (which bounds it) and logs it.
func (in *injector) step(base context.Context, node int, what string, do func(context.Context) error) error {
	sctx, cancel := context.WithTimeout(base, faultStep)
	defer cancel()
	if err := do(sctx); err != nil {
		return fmt.Errorf("checker: fault injection on node %d (%s): %w", node, what, err)
	}
	in.event(node, what)
	return nil
}

// event logs something the injector did.
func (in *injector) event(node int, what string) {
	in.mu.Lock()
	in.st.Events = append(in.st.Events, FaultEvent{At: time.Now(), Node: node, What: what})
	in.mu.Unlock()
}

// hold lets the current faults act for d; it is the schedule, not a
// synchronisation. It fails when the run ends first.
func (in *injector) hold(d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-in.ctx.Done():
		return in.ctx.Err()
	}
}

// next returns the k-th replica in turn, or the next one after it that is
// not held after a restart; -1 if all are.
func (in *injector) next(k int) int {
	for j := range in.replicas {
		if i := in.replicas[(k+j)%len(in.replicas)]; !in.isHeld(i) {
			return i
		}
	}
	return -1
}

// isHeld reports whether replica i is still in the window after a restart
// in which it is behind what it served before (see held).
func (in *injector) isHeld(i int) bool {
	until, ok := in.held[i]
	if ok && !time.Now().Before(until) {
		delete(in.held, i)
		ok = false
	}
	return ok
}

// between draws a duration in [lo, hi].
func (in *injector) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(in.rng.Int64N(int64(hi-lo)+1))
}

// setDelays gives every replica that is not held the apply delay
// delay(node). Each harness call waits for the server to show the change,
// so the replicas get their delays in parallel (drawn first, in order,
// for repeatable choices).
func (in *injector) setDelays(delay func(node int) time.Duration) error {
	var nodes []int
	for _, i := range in.replicas {
		if !in.isHeld(i) {
			nodes = append(nodes, i)
		}
	}
	ds := make([]time.Duration, len(nodes))
	for j, i := range nodes {
		ds[j] = delay(i).Round(time.Millisecond)
	}
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for j, i := range nodes {
		wg.Go(func() {
			errs[j] = in.step(in.ctx, i, "delay "+ds[j].String(), func(ctx context.Context) error { return in.cl.SetApplyDelay(ctx, i, ds[j]) })
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	in.st.DelayChanges += len(nodes)
	return nil
}

// quiet drops the error of a harness call cut short by the end of the run.
func quiet(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil
	}
	return err
}

// restore removes every injected fault (a replica left down, apply
// delays, paused replay) and waits until the replicas have caught up.
func restore(ctx context.Context, cl Cluster) error {
	var errs []error
	for _, i := range replicasOf(cl) {
		// Start does nothing on a running node; the injector restarts the
		// replicas it kills, but a failed run may have left one down.
		if err := cl.Start(ctx, i); err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, cl.ResumeReplay(ctx, i), cl.SetApplyDelay(ctx, i, 0))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("checker: removing faults: %w", err)
	}
	if err := cl.WaitCaughtUp(ctx); err != nil {
		return fmt.Errorf("checker: waiting for the replicas after the faults: %w", err)
	}
	return nil
}
