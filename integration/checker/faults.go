package checker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// Faults configures the lag injector. In each cycle it gives every replica
// a random apply delay, keeps it for a random part of Hold, then pauses
// replay on one replica (the replicas take turns) for a random time in
// [MinPause, MaxPause] and resumes it. The delays are drawn from
// [0, MaxApplyDelay] in odd cycles (lag spikes) and from
// [0, MaxApplyDelay/10] in even ones (the usual tens of milliseconds):
// replicas whose lags differ only a little are where a router's notion of
// "fresh enough" is tested most finely.
type Faults struct {
	// Off disables the injector.
	Off bool
	// MaxApplyDelay bounds recovery_min_apply_delay; default 500ms.
	MaxApplyDelay time.Duration
	// MinPause and MaxPause bound a replay pause; default 200ms and 500ms.
	MinPause, MaxPause time.Duration
	// Hold bounds how long a set of delays stays before the next pause
	// (it stays between Hold/2 and Hold); default 500ms. Every change of
	// lag opens a window in which a router's cached replica positions are
	// out of date.
	Hold time.Duration
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
	return f
}

func (f *Faults) validate() error {
	if f.MaxApplyDelay < 0 || f.MinPause < 0 || f.MaxPause < f.MinPause || f.Hold < 0 {
		return fmt.Errorf("%w: faults %+v", errBadOptions, *f)
	}
	return nil
}

// FaultEvent is one change the injector made.
type FaultEvent struct {
	At   time.Time
	Node int
	// What is "delay 123ms", "pause" or "resume".
	What string
}

// FaultStats counts what the injector did.
type FaultStats struct {
	DelayChanges, Pauses int
	Events               []FaultEvent
}

// faultStep bounds one harness call (each waits until the server shows
// the change).
const faultStep = 10 * time.Second

// injectFaults varies lag on the replicas until ctx ends. It leaves the
// last delays and possibly a paused replica behind: restore undoes them.
func injectFaults(ctx context.Context, cl Cluster, f Faults, rng *rand.Rand) (FaultStats, error) {
	var st FaultStats
	replicas := replicasOf(cl)
	if f.Off || len(replicas) == 0 {
		return st, nil
	}
	var mu sync.Mutex // guards st.Events: delays are set on all replicas at once
	// step runs one harness call under base (which bounds it) and logs it.
	step := func(base context.Context, node int, what string, do func(context.Context) error) error {
		sctx, cancel := context.WithTimeout(base, faultStep)
		defer cancel()
		if err := do(sctx); err != nil {
			return fmt.Errorf("checker: fault injection on node %d (%s): %w", node, what, err)
		}
		mu.Lock()
		st.Events = append(st.Events, FaultEvent{At: time.Now(), Node: node, What: what})
		mu.Unlock()
		return nil
	}
	// hold lets the current faults act for d; it is the schedule, not a
	// synchronisation.
	hold := func(d time.Duration) error {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	between := func(lo, hi time.Duration) time.Duration {
		if hi <= lo {
			return lo
		}
		return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
	}
	for cycle := 0; ; cycle++ {
		maxDelay := f.MaxApplyDelay
		if cycle%2 == 0 {
			maxDelay /= 10
		}
		// Each harness call waits for the server to show the change, so
		// the replicas get their delays in parallel.
		errs := make([]error, len(replicas))
		var wg sync.WaitGroup
		for j, i := range replicas {
			d := between(0, maxDelay).Round(time.Millisecond)
			wg.Go(func() {
				errs[j] = step(ctx, i, "delay "+d.String(), func(ctx context.Context) error { return cl.SetApplyDelay(ctx, i, d) })
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return st, quiet(ctx, err)
		}
		st.DelayChanges += len(replicas)
		if err := hold(between(f.Hold/2, f.Hold)); err != nil {
			return st, nil
		}
		i := replicas[cycle%len(replicas)]
		if err := step(ctx, i, "pause", func(ctx context.Context) error { return cl.PauseReplay(ctx, i) }); err != nil {
			return st, quiet(ctx, err)
		}
		st.Pauses++
		// Resume even when the run ends during the pause.
		held := hold(between(f.MinPause, f.MaxPause))
		if err := step(context.WithoutCancel(ctx), i, "resume", func(ctx context.Context) error { return cl.ResumeReplay(ctx, i) }); err != nil {
			return st, err
		}
		if held != nil {
			return st, nil
		}
	}
}

// quiet drops the error of a harness call cut short by the end of the run.
func quiet(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil
	}
	return err
}

// restore removes every injected fault (apply delays, paused replay) and
// waits until the replicas have caught up.
func restore(ctx context.Context, cl Cluster) error {
	var errs []error
	for _, i := range replicasOf(cl) {
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
