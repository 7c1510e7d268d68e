package checker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// The proxy-restart fault (Faults.RestartProxies).
//
// A pooler or an endpoint restarts for an upgrade, a configuration change
// or a rescheduled pod. Every client connection through it is closed, and
// the connections made afterwards reach servers that the closed ones did
// not: behind an endpoint, a new connection may land on the other
// replica; behind PgBouncer, on a new server connection. A router that
// keeps facts about "the server behind this address" across that must
// learn them again from the connection. Each restart here stops every
// proxy of the Deployment at once (SIGTERM: PgBouncer's immediate shutdown,
// HAProxy's hard stop) and starts it again on its port, a few milliseconds
// later.

// ProxyRestart is one restart of a Deployment's proxy by the injector.
type ProxyRestart struct {
	Proxy string
	// At is when the proxy was signalled; Up when it listened again (zero
	// if the restart failed).
	At, Up time.Time
	// Downtime is how long its port refused connections.
	Downtime time.Duration
}

// restartProxies restarts every proxy of cl (when cl is a Deployment with
// proxies and f.RestartProxies is set) every f.ProxyRestartEvery until
// ctx ends, and leaves them all running.
func restartProxies(ctx context.Context, cl Cluster, f Faults) ([]ProxyRestart, []FaultEvent, error) {
	d, ok := cl.(*Deployment)
	if !ok || !f.RestartProxies || f.Off || len(d.proxies) == 0 {
		return nil, nil, nil
	}
	var (
		mu       sync.Mutex
		restarts []ProxyRestart
		events   []FaultEvent
	)
	restart := func(ctx context.Context, p shapeProxy) error {
		r := ProxyRestart{Proxy: p.name, At: time.Now()}
		down, err := p.p.Restart(ctx)
		if err == nil {
			r.Up, r.Downtime = time.Now(), down
		}
		mu.Lock()
		defer mu.Unlock()
		restarts = append(restarts, r)
		if err != nil {
			return fmt.Errorf("checker: restarting proxy %s: %w", p.name, err)
		}
		events = append(events, FaultEvent{At: r.At, Node: -1, What: fmt.Sprintf("restart of proxy %s (%v down)", p.name, down.Round(time.Millisecond))})
		return nil
	}
	all := func(ctx context.Context, only func(Proxy) bool) error {
		errs := make([]error, len(d.proxies))
		var wg sync.WaitGroup
		for k, p := range d.proxies {
			if only(p.p) {
				wg.Go(func() { errs[k] = restart(ctx, p) })
			}
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	t := time.NewTicker(f.ProxyRestartEvery)
	defer t.Stop()
	var err error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-t.C:
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), faultStep)
		err = all(sctx, func(Proxy) bool { return true })
		cancel()
		if err != nil {
			break
		}
	}
	// Leave none down, even after a failed restart.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), faultStep)
	defer cancel()
	err = errors.Join(err, all(sctx, func(p Proxy) bool { return !p.Running() }))
	return restarts, events, err
}

// proxyError reports whether op failed because a proxy was restarted: it
// ran while one was down or shortly after it came back (killErrorGrace: a
// pooled connection through the old process fails only when next used),
// and its error says the connection was lost or refused. Such operations,
// reads and writes, are tolerated like those of a killed replica.
func proxyError(op *Op, restarts []ProxyRestart) bool {
	if op.Err == nil || !connectionLost(op.Err) {
		return false
	}
	for i := range restarts {
		r := &restarts[i]
		up := r.Up
		if up.IsZero() {
			up = r.At.Add(faultStep)
		}
		if op.End.After(r.At) && op.Start.Before(up.Add(killErrorGrace)) {
			return true
		}
	}
	return false
}

// ProxyOutage returns how long after a restarted proxy was back the run's
// operations kept failing because of the restart: the largest gap between
// a restart's Up and the end of an operation it made fail (ProxyErrors),
// 0 if none failed after Up. A router that waits for a proxy that is back
// within milliseconds keeps it near 0; one that marks the address down
// after a refused connection fails reads until it probes again.
func (r *Report) ProxyOutage() time.Duration {
	var worst time.Duration
	for i := range r.History.Ops {
		op := &r.History.Ops[i]
		if killError(op, r.Faults.Restarts) || !proxyError(op, r.Faults.ProxyRestarts) {
			continue
		}
		// Against the last restart before the operation ended: with
		// restarts close together, an earlier one's Up says nothing.
		var last *ProxyRestart
		for k := range r.Faults.ProxyRestarts {
			if p := &r.Faults.ProxyRestarts[k]; op.End.After(p.At) && (last == nil || p.At.After(last.At)) {
				last = p
			}
		}
		if last != nil && !last.Up.IsZero() {
			worst = max(worst, op.End.Sub(last.Up))
		}
	}
	return worst
}
