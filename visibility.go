package pgreplica

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/puddle/v2"
	"github.com/pgreplica/pgreplica/internal/inner"
	"github.com/pgreplica/pgreplica/internal/probe"
)

// A replica can show a commit before the primary does. The primary makes a
// commit visible to its other backends when the transaction leaves its
// process array: after the commit record was flushed (and sent to the
// replicas), and after a synchronous standby acknowledged it. Visibility
// order on the primary is not WAL order. A session that read a row on a
// replica and then reads it on the primary (right after its own write, or
// as a fallback) could see it go back in time. Replicas replay in WAL
// order, so moving between replicas by position is safe; moving to the
// primary is not.
//
// So a session's primary read that follows one of its replica reads first
// lists, on the primary, the transactions its snapshot does not show: in
// progress in the snapshot, or assigned after its xmax (up to the next
// transaction id, which age() reads without assigning one). Then it asks
// the replica of that read whether it shows any of them as committed. A
// transaction the replica read saw is committed there now, so if none is,
// the primary's snapshot shows everything that read saw, and so does the
// later snapshot of the read itself. Otherwise the check runs again
// shortly, until those transactions end on the primary. The lists are
// usually empty or short; the check costs two round trips, and only a
// session's primary read right after one of its replica reads pays them.
// The two statements are internal/probe's (PrimaryHiddenSQL,
// ReplicaShowsSQL).

// primaryShowsSession makes a session read on the primary connection p see
// at least what the session's last replica read saw (see above). Most
// primary reads need no check.
func (r *router) primaryShowsSession(ctx context.Context, pl *plan, p *physical) error {
	sysid := pl.topo.sysid
	shownBy, srv, gen, ok := pl.session.primaryMayHide(sysid)
	if !ok {
		return nil
	}
	if shownBy != nil {
		if err := r.awaitPrimaryShows(ctx, p, shownBy, srv); err != nil {
			return err
		}
	}
	pl.session.primaryShows(sysid, gen)
	return nil
}

// awaitPrimaryShows waits until the primary, on p, hides no transaction
// that server srv of replica n shows as committed, until ctx ends or,
// without a deadline, for ConnectTimeout. A replica that cannot be asked
// (down, or restarted) shows nothing the check could wait for.
func (r *router) awaitPrimaryShows(ctx context.Context, p *physical, n *node, srv *server) error {
	start := time.Now()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = start.Add(r.cfg.ConnectTimeout)
	}
	backoff := 100 * time.Microsecond
	waited := false
	for {
		hidden, err := inner.QueryText(ctx, p.conn, probe.PrimaryHiddenSQL)
		if err != nil || hidden == "{}" {
			return err
		}
		shown, err := r.replicaShows(ctx, n, srv, hidden, deadline, &waited)
		if err != nil || shown == 0 {
			if ctx.Err() != nil {
				return waitEnded(ctx, "the primary to show what a replica showed this session", start)
			}
			if errors.Is(err, errReplicaBusy) {
				return err
			}
			return nil
		}
		r.countVisibilityWait(&waited)
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("pgreplica: the primary still hides %d transactions a replica showed this session as committed: %w",
				shown, context.DeadlineExceeded)
		}
		t := time.NewTimer(min(backoff, left))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return waitEnded(ctx, fmt.Sprintf("the primary to show %d transactions a replica showed this session as committed", shown), start)
		}
		backoff = min(2*backoff, 5*time.Millisecond)
	}
}

// countVisibilityWait counts a read's first wait (PrimaryVisibilityWaits).
func (r *router) countVisibilityWait(waited *bool) {
	if !*waited {
		*waited = true
		r.metrics.visibilityWaits.Add(1)
	}
}

// errReplicaBusy: the replica a session read on could not be asked what
// the primary must show before the read's deadline.
var errReplicaBusy = errors.New("pgreplica: no connection to the replica this session last read on came free to ask what the primary must show")

// replicaShows counts the transactions of the xid8 array xids that
// server srv of replica n shows as committed. Behind an endpoint the
// question goes to that very server: another one behind the address may
// not have replayed what the read saw there. When the connections tried
// reach other servers while the pool still holds one to srv, busy with
// another statement, it waits for that one until deadline: answering
// "none" instead let the primary show a session less than it had seen
// (a Patroni run through HAProxy's reader port). Only a server the pool
// no longer reaches (gone, restarted) shows nothing to wait for.
func (r *router) replicaShows(ctx context.Context, n *node, srv *server, xids string, deadline time.Time, waited *bool) (int64, error) {
	res, err := r.acquireOnServer(ctx, n, srv)
	for backoff := 100 * time.Microsecond; res == nil && err == nil && srv != nil && n.pool.reaches(srv); backoff = min(2*backoff, 5*time.Millisecond) {
		r.countVisibilityWait(waited)
		left := time.Until(deadline)
		if left <= 0 {
			return 0, fmt.Errorf("%w: %w", errReplicaBusy, context.DeadlineExceeded)
		}
		t := time.NewTimer(min(backoff, left))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return 0, ctx.Err()
		}
		res, err = r.acquireOnServer(ctx, n, srv)
	}
	if err != nil || res == nil {
		return 0, err
	}
	s, err := inner.QueryText(ctx, res.Value().conn, probe.ReplicaShowsSQL, driver.NamedValue{Ordinal: 1, Value: xids})
	n.pool.release(res, err)
	if err != nil {
		return 0, err
	}
	return probe.Int(s)
}

// acquireOnServer borrows a connection of n that reaches srv: any one
// where n's connections all reach one server, or where the server is not
// known (behind a pooler). On an endpoint it takes more connections while
// those it gets reach other servers, a few at most (serverTries); nil
// when none reached srv (it went away, or restarted).
func (r *router) acquireOnServer(ctx context.Context, n *node, srv *server) (*puddle.Resource[*physical], error) {
	if srv == nil || !n.endpoint.Load() {
		return n.pool.acquireRead(ctx)
	}
	return r.onServers(ctx, n, func(p *physical) (bool, error) { return p.srv == srv, nil })
}
