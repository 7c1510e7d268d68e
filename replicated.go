package pgreplica

import (
	"context"
	"fmt"
	"time"
)

// Writes durable on replicas when asked (WithReplicated): once a write
// committed, its position is read (shared with other writes, as for a
// token) and the write returns when enough replicas show it flushed. The
// replicas' flush positions come from the monitor's probes of them, which
// are asked for at once and then on a clock: the primary pays nothing
// more than the one capture, and writes without the option do not wait.

// Replication waits poke the replicas' probes after replicatedRetry,
// then twice as long each time, up to maxReplicatedRetry: a replica on
// loopback flushes a write within a millisecond or two; one across a
// region takes its round trip.
const (
	replicatedRetry    = 2 * time.Millisecond
	maxReplicatedRetry = 50 * time.Millisecond
)

// errReplicatedPgx refuses a WithReplicated context in pgreplicapgx,
// whose writes do not wait for replicas yet.
var errReplicatedPgx = fmt.Errorf("%w: WithReplicated is supported through database/sql only, not pgreplicapgx yet", ErrBadConfig)

// NotReplicatedError is the error of a WithReplicated write whose context
// ended before enough replicas showed it flushed. The write committed on
// the primary; sending it again would apply it twice. It matches
// ErrNotReplicated, and the context's error when the context ended the
// wait.
type NotReplicatedError struct {
	// Want is the number of replicas asked for, Have how many showed the
	// write when the wait ended.
	Want, Have int
	// Position is the write's position (0 when it could not be read).
	Position LSN
	// Waited is how long the write waited after it committed.
	Waited time.Duration
	// Err is what ended the wait: the context's error, or the failure to
	// read the write's position.
	Err error
}

func (e *NotReplicatedError) Error() string {
	pos := "its position unknown"
	if e.Position != 0 {
		pos = "at " + e.Position.String()
	}
	return fmt.Sprintf("%v: %d of %d replicas flushed the write (%s) after %v: %v",
		ErrNotReplicated, e.Have, e.Want, pos, roundWait(e.Waited), e.Err)
}

func (e *NotReplicatedError) Unwrap() []error { return []error{ErrNotReplicated, e.Err} }

// awaitReplicated returns once pl.replicated replicas of the write's
// cluster show the write of ticket flushed, or a *NotReplicatedError.
func (r *router) awaitReplicated(ctx context.Context, pl *plan, ticket uint64) error {
	start := time.Now()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.cfg.ConnectTimeout)
		defer cancel()
	}
	fail := func(have int, pos LSN, err error) error {
		return &NotReplicatedError{Want: pl.replicated, Have: have, Position: pos, Waited: time.Since(start), Err: err}
	}
	m := pl.topo.marks
	if err := m.Resolve(ctx, r.capturing(), ticket); err != nil {
		return fail(0, 0, err)
	}
	pos := LSN(m.All())
	retry := replicatedRetry
	poke := time.NewTimer(0)
	defer poke.Stop()
	for {
		t := r.topo.Load()
		have := flushedOn(t, pl.topo.sysid, pos)
		if have >= pl.replicated {
			return nil
		}
		select {
		case <-ctx.Done():
			return fail(have, pos, ctx.Err())
		case <-poke.C:
			for i := range t.nodes {
				if t.nodes[i].status.role == roleReplica {
					t.nodes[i].n.poke()
				}
			}
			poke.Reset(retry)
			retry = min(2*retry, maxReplicatedRetry)
		case <-r.mon.changedCh():
		}
	}
}

// flushedOn counts the replicas of cluster sysid in t, on its primary's
// timeline, that showed pos flushed (or replayed) when last probed. A
// reader endpoint is not counted: which server its probe reached says
// nothing of the others behind it.
func flushedOn(t *topology, sysid uint64, pos LSN) int {
	have := 0
	for i := range t.nodes {
		v := &t.nodes[i]
		st := &v.status
		if st.role != roleReplica || v.excluded != rejectNone || st.sysid != sysid || v.n.perConn.Load() {
			continue
		}
		if max(st.receive, st.lsn, LSN(v.n.replay.Load())) >= pos {
			have++
		}
	}
	return have
}
