package checker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// cleanupTimeout bounds undoing the faults and dropping the table.
const cleanupTimeout = time.Minute

// Run runs the workload through o.Target against cl while injecting
// faults (lag, paused replay, replicas killed and restarted, and the
// proxies of a Deployment restarted), then
// verifies the history. It recreates o.Table first, and afterwards
// removes every fault (restarting any replica left down), waits for the
// replicas to catch up and drops the table, so runs can follow each other
// on one cluster.
//
// The error reports a run that could not be carried out (setup, a broken
// cluster, a session whose operations kept failing); violations are in
// the Report, as are the errors of individual operations. A Report is
// returned with what was recorded even when the error is not nil, unless
// setup failed.
func Run(ctx context.Context, cl Cluster, o Options) (rep *Report, err error) {
	o = o.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	if err := createTable(ctx, cl, o.Table, o.Sessions, o.Keys); err != nil {
		return nil, err
	}
	if o.Faults.SyncStandby {
		if err := setSyncStandby(ctx, cl, true); err != nil {
			return nil, err
		}
		defer func() {
			err = errors.Join(err, detached(ctx, func(ctx context.Context) error { return setSyncStandby(ctx, cl, false) }))
		}()
	}
	defer func() {
		err = errors.Join(err, detached(ctx, func(ctx context.Context) error { return dropTable(ctx, cl, o.Table) }))
	}()
	r, err := openRouter(ctx, cl, &o)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, r.close()) }()

	o.Logf("checker: %s: %d sessions for %v, seed %d", o.Target, o.Sessions, o.Duration, o.Seed)
	fctx, stopFaults := context.WithCancel(ctx)
	type faultResult struct {
		st  FaultStats
		err error
	}
	faultsDone := make(chan faultResult, 1)
	park := newParking()
	go func() {
		st, err := injectFaults(fctx, cl, &o, rand.New(rand.NewPCG(o.Seed, ^uint64(0))), park)
		faultsDone <- faultResult{st, err}
	}()
	proxiesDone := make(chan faultResult, 1)
	go func() {
		var st FaultStats
		var err error
		st.ProxyRestarts, st.Events, err = restartProxies(fctx, cl, o.Faults)
		proxiesDone <- faultResult{st, err}
	}()
	began := time.Now()
	logs, werr := runSessions(ctx, r, cl, &o, park)
	elapsed := time.Since(began)
	stopFaults()
	fr, pr := <-faultsDone, <-proxiesDone
	fr.st.ProxyRestarts = pr.st.ProxyRestarts
	fr.st.Events = append(fr.st.Events, pr.st.Events...)
	slices.SortStableFunc(fr.st.Events, func(a, b FaultEvent) int { return a.At.Compare(b.At) })
	fr.err = errors.Join(fr.err, pr.err)
	rerr := detached(ctx, func(ctx context.Context) error { return restore(ctx, cl) })

	rep = newReport(&o, cl, merge(logs), elapsed, fr.st)
	stats, serr := r.stats(ctx)
	rep.Stats = stats
	if err := errors.Join(werr, fr.err, serr, rerr); err != nil {
		return rep, fmt.Errorf("checker: %s: %w", o.Target, err)
	}
	o.Logf("checker: %s: %d operations, %d violations", o.Target, len(rep.History.Ops), len(rep.Violations))
	return rep, nil
}

// detached runs cleanup f even when ctx has ended, bounded by
// cleanupTimeout.
func detached(ctx context.Context, f func(context.Context) error) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	return f(cctx)
}
