package pgreplica

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// A read the router could not serve says what it waited for, for how
// long, which replica came closest, and what ended the wait: a setting,
// by its DSN name, or the context, whose error it then wraps, so that
// errors.Is(err, context.DeadlineExceeded) holds as it does with the
// inner driver alone. The context's error is never returned bare.

// replicaWaitError is the error of a read that waited for a replica to
// replay pl.need (best: the highest position its checks saw): ended by
// the wait budget, or by the context, whose error it then wraps.
func replicaWaitError(ctx context.Context, pl *plan, best LSN) error {
	ctxErr, limit := waitEnd(ctx, pl)
	detail := fmt.Sprintf("waited %v for a replica to replay %s, until %s", roundWait(pl.waited()), pl.need, limit)
	if cl := closestReplica(pl, best); cl != "" {
		detail += "; " + cl
	}
	nf := &NoFreshReplicaError{Reason: ReasonTimeout, Detail: detail}
	if ctxErr != nil {
		return fmt.Errorf("%w: %w", nf, ctxErr)
	}
	return nf
}

// futileWaitError is the error of a read whose wait for a replica was
// not started: no replica is predicted to replay pl.need in time.
func futileWaitError(ctx context.Context, pl *plan) *NoFreshReplicaError {
	within := fmt.Sprintf("within pgreplica_wait_budget (%v)", pl.budget)
	if dl, ok := ctx.Deadline(); ok && dl.Equal(pl.waitDeadline(ctx)) {
		within = fmt.Sprintf("in the %v left before the context's deadline", roundWait(time.Until(dl)))
	}
	detail := fmt.Sprintf("no replica is predicted to replay %s %s (from their lag, replay rate, pause and apply delay): not waited for", pl.need, within)
	if cl := closestReplica(pl, 0); cl != "" {
		detail += "; " + cl
	}
	return &NoFreshReplicaError{Reason: ReasonTimeout, Detail: detail}
}

// waitEnd says what ended a wait bounded by pl's deadline: the context
// (its error, also when its deadline passes a moment after the wait's
// last check), or the wait budget.
func waitEnd(ctx context.Context, pl *plan) (ctxErr error, limit string) {
	if err := ctx.Err(); err != nil {
		return err, contextEnd(err)
	}
	if dl, ok := ctx.Deadline(); ok && !dl.After(pl.deadline) {
		return context.DeadlineExceeded, "the context's deadline"
	}
	return nil, fmt.Sprintf("pgreplica_wait_budget (%v) ran out", pl.budget)
}

// contextEnd says what ended a wait that ended with the context's error.
func contextEnd(ctxErr error) string {
	if errors.Is(ctxErr, context.DeadlineExceeded) {
		return "the context's deadline"
	}
	return "its context was cancelled"
}

// closestReplica names, of the replicas the read may use, the one that
// has replayed the most, and how far it is from pl.need: "closest
// 127.0.0.1:5433 at 0/3000000 (96 bytes behind, lag 1.2s at its last
// probe)"; best is the highest position a check saw, when higher (behind
// an endpoint each connection may reach another server). "" when the
// read may use none.
func closestReplica(pl *plan, best LSN) string {
	var v *nodeView
	var at LSN
	for set := pl.replicas(false); set != 0; set &= set - 1 {
		w := &pl.topo.nodes[set.nth(0)]
		if r := LSN(w.n.replay.Load()); v == nil || r > at {
			v, at = w, r
		}
	}
	if v == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "closest %s at %s (", v.n.name, at)
	if pl.need > at {
		fmt.Fprintf(&b, "%d bytes behind, ", uint64(pl.need-at))
	}
	fmt.Fprintf(&b, "lag %v at its last probe", roundWait(v.lag))
	if v.status.paused {
		b.WriteString(", replay paused")
	}
	if v.status.applyDelay > 0 {
		fmt.Fprintf(&b, ", recovery_min_apply_delay %v", v.status.applyDelay)
	}
	b.WriteString(")")
	if best > at {
		fmt.Fprintf(&b, ", a check saw %s", best)
	}
	return b.String()
}

// noReplicaDetail says why no replica may serve a read that needs no
// position: each replica's rejection, with the setting or bound it broke
// ("127.0.0.1:5433: lag 3s > pgreplica_max_lag 1s").
func noReplicaDetail(pl *plan) string {
	why := "no healthy replica within the lag bounds"
	if pl.maxLag == 0 {
		why = "no healthy replica"
	}
	if pl.topo == nil {
		return why
	}
	sep := ": "
	for i := range pl.topo.nodes {
		v := &pl.topo.nodes[i]
		if i == pl.topo.primary {
			continue
		}
		if r := pl.reject(v, false).explain(v, pl, pl.topo); r != "" {
			why += sep + v.n.name + ": " + r
			sep = "; "
		}
	}
	return why
}

// fallbackLimitError is ErrFallbackLimit as a read gets it: how long it
// queued for a slot, what ended the wait (the context, or ConnectTimeout,
// whose error it wraps) and why it fell back.
type fallbackLimitError struct {
	slots  int
	waited time.Duration
	limit  string
	// why is what kept the read off the replicas; its text only: an
	// ErrFallbackLimit is no ErrNoFreshReplica.
	why    error
	ctxErr error
}

func (e *fallbackLimitError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: waited %v for one of the %d fallback slots on the primary (half of pgreplica_max_conns_per_host), all held, until %s",
		ErrFallbackLimit, roundWait(e.waited), e.slots, e.limit)
	if e.why != nil {
		b.WriteString("; it fell back because ")
		b.WriteString(strings.TrimPrefix(e.why.Error(), "pgreplica: "))
	}
	if e.ctxErr != nil {
		b.WriteString(": ")
		b.WriteString(e.ctxErr.Error())
	}
	return b.String()
}

func (e *fallbackLimitError) Unwrap() []error {
	if e.ctxErr != nil {
		return []error{ErrFallbackLimit, e.ctxErr}
	}
	return []error{ErrFallbackLimit}
}

// waitEnded is the error of a wait of the router that ctx ended: what it
// waited for (a noun phrase), since when (zero: not known), and ctx's
// error, which it wraps.
func waitEnded(ctx context.Context, what string, since time.Time) error {
	if since.IsZero() {
		return fmt.Errorf("pgreplica: waited for %s, until its context ended: %w", what, ctx.Err())
	}
	return fmt.Errorf("pgreplica: waited %v for %s, until its context ended: %w", roundWait(time.Since(since)), what, ctx.Err())
}

// withContextErr returns err, the failure of a wait that ctx may have
// ended, wrapping ctx's error too when ctx ended and err does not say so.
func withContextErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w: %w", err, cerr)
	}
	return err
}

func noReplicaError(pl *plan) *NoFreshReplicaError {
	return &NoFreshReplicaError{Reason: ReasonNoReplica, Detail: noReplicaDetail(pl)}
}

// explain says in words why a filter rejected v ("" for rejectNone).
func (r rejection) explain(v *nodeView, pl *plan, t *topology) string {
	st := &v.status
	var pst nodeStatus
	if p := t.primaryNode(); p != nil {
		pst = p.status
	}
	switch r {
	case rejectUnprobed:
		return "not probed yet"
	case rejectUnreachable:
		if errors.Is(st.err, ErrInsufficientPrivilege) {
			return "answers, but the role lacks privileges: " + st.err.Error()
		}
		return "unreachable: " + st.err.Error()
	case rejectRetired:
		return "no longer an address of " + v.n.host.Addr
	case rejectAlias:
		return "the same server as " + v.aliasOf.name + ", which takes its statements"
	case rejectSuperseded:
		return fmt.Sprintf("out of recovery on timeline %d beside the primary on timeline %d: superseded, gets no writes", st.timeline, pst.timeline)
	case rejectNotReplica:
		return "not a replica"
	case rejectOtherCluster:
		return fmt.Sprintf("system identifier %d differs from the primary's %d", st.sysid, pst.sysid)
	case rejectOldTimeline:
		if st.receiverHidden {
			return fmt.Sprintf("on timeline %d as of its last restartpoint, behind the primary's timeline %d: "+
				"its WAL receiver's timeline needs pg_monitor, so it gets reads once a restartpoint shows it follows", st.timeline, pst.timeline)
		}
		return fmt.Sprintf("on timeline %d, behind the primary's timeline %d: not following it yet", st.timeline, pst.timeline)
	case rejectNewTimeline:
		return fmt.Sprintf("on timeline %d, ahead of the primary's timeline %d: it follows another primary, not this one", st.timeline, pst.timeline)
	case rejectSuspect:
		return "suspect: a query failed on it; waiting for the next probe"
	case rejectTried:
		return "failed this read"
	case rejectLagTime:
		return fmt.Sprintf("lag %v > pgreplica_max_lag %v", v.lag.Round(time.Millisecond), pl.maxLag)
	case rejectStale:
		return fmt.Sprintf("lag %v > the read's staleness bound %v", v.lag.Round(time.Millisecond), pl.maxLag)
	case rejectBehind:
		return fmt.Sprintf("has not replayed %s yet", pl.need)
	case rejectPooledTx:
		return "behind a pooler: a transaction that needs a position cannot be proven there"
	case rejectUnchecked:
		return "an endpoint or a pooler: a read that cannot check its connection may reach a server not known to have the position"
	}
	return ""
}
