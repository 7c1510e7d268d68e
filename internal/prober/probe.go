package prober

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/pgreplica/pgreplica/internal/inner"
	"github.com/pgreplica/pgreplica/internal/marks"
	"github.com/pgreplica/pgreplica/internal/probe"
	"github.com/pgreplica/pgreplica/internal/sqlstate"
)

// probeOnce probes once and hands the answer to every subscriber; false:
// the prober is stopping.
func (p *Prober) probeOnce(ctx context.Context) bool {
	// A probe of the primary reads its position after every write
	// that took a ticket before it was sent: it covers them for free.
	var covers marks.Probe
	if prev := p.last; prev != nil && prev.Role == Primary && prev.Err == nil && prev.Sysid != 0 {
		covers = marks.Of(prev.Sysid).Probing()
	}
	// A probe on the open connection gets the probe timeout: a host
	// that stops answering is down that long after the probe was sent.
	// The timeout closes the socket, because lib/pq answers a cancelled
	// context by asking the server to cancel, which a frozen server
	// never does. A capture borrowing the connection is waited for
	// (it too ends within the probe timeout).
	if p.lock.lock(ctx) != nil {
		return false
	}
	timeout := p.key.Timeout
	if p.conn == nil {
		timeout += p.key.ConnectTimeout
	}
	seq := p.started.Add(1)
	pctx, cancel := context.WithTimeout(ctx, timeout)
	stop := context.AfterFunc(pctx, func() { p.socks.Close() })
	st := p.probeFn(pctx)
	if !stop() {
		p.closeConn() // its socket may be closed
		if st.Err != nil && ctx.Err() == nil {
			st.Err = fmt.Errorf("no answer to the probe within %v: %w", timeout, st.Err)
		}
	}
	cancel()
	st.Seq, st.Pooled = seq, p.pooled
	p.lock.unlock()
	if st.Err == nil && st.Role == Primary {
		covers.Probed(st.LSN) // the marks decide what it covers
	}
	if ctx.Err() != nil {
		return false
	}
	if st.Err != nil {
		p.failures++
	} else {
		p.failures = 0
	}
	p.last = st
	p.mu.Lock()
	for _, s := range p.subs {
		s.Apply(st)
	}
	p.mu.Unlock()
	return true
}

// fullProbeEvery: one probe in so many asks everything (on a fresh
// connection and after a failure, every probe does): a new sync standby
// shows within 2 s while statements run, 8 s while idle.
const fullProbeEvery = 8

// probe runs probe.Query on an idle pooled connection when one is
// (probePooled), else on the probe connection, connecting first when
// there is none.
func (p *Prober) probe(ctx context.Context) *Status {
	var st *Status
	var err error
	if p.failed == nil {
		var lent bool
		st, lent, err = p.probePooled(ctx)
		switch {
		case lent && err == nil:
			p.reapOwnConn()
			return st
		case lent && (errors.Is(err, context.DeadlineExceeded) || !sqlstate.ConnLost(err) || ctx.Err() != nil):
			return &Status{Err: err, At: time.Now()}
		case lent:
			// The pooled connection died since it was last used (a
			// restart?): ask on the probe connection, as below.
			return p.probeAfterLost(ctx)
		}
	}
	reused := p.conn != nil
	st, err = p.probeConn(ctx)
	if err != nil {
		p.closeConn()
	}
	if err != nil && reused && sqlstate.ConnLost(err) && ctx.Err() == nil {
		// The connection died since the last probe (a restart): what
		// the host says to a new one is its state now, and the cause
		// worth reporting ("connection refused" rather than lib/pq's
		// "bad connection").
		return p.probeAfterLost(ctx)
	}
	if err != nil {
		return &Status{Err: err, At: time.Now()}
	}
	return st
}

// probeAfterLost probes on a new connection after the one probed on
// died. A server back from a restart may have replayed less than it had
// (crash recovery stops at its last restartpoint's consistent point):
// what was known of its replay must be forgotten, as after a failed
// probe.
func (p *Prober) probeAfterLost(ctx context.Context) *Status {
	p.closeConn()
	st, err := p.probeConn(ctx)
	if err != nil {
		p.closeConn()
		return &Status{Err: err, At: time.Now()}
	}
	st.Restarted = true
	return st
}

// probePooled probes on an idle connection of a subscriber's pool
// (onPooled), within the probe timeout. lent: one was lent.
func (p *Prober) probePooled(ctx context.Context) (st *Status, lent bool, err error) {
	lent, err = p.onPooled(ctx, p.key.Timeout, func(ctx context.Context, c Lent) error {
		var err error
		st, err = p.askAny(ctx, c.Conn(), c.Since(), false)
		return err
	})
	return st, lent, err
}

// probeConn probes on the probe connection, connecting first when there
// is none.
func (p *Prober) probeConn(ctx context.Context) (*Status, error) {
	fresh := p.conn == nil
	if err := p.failed; err != nil {
		p.failed = nil
		return nil, err
	}
	if fresh {
		if err := p.connect(ctx); err != nil {
			return nil, err
		}
	}
	if req := p.denied & probe.RequiredFns; req != 0 {
		return nil, p.cfg.Denied(p.user, req)
	}
	p.connUsed = time.Now()
	return p.askAny(ctx, p.conn, p.connAt, fresh)
}

// askAny runs one probe on conn, open since since: a full one on a fresh
// connection, after a failure and one time in fullProbeEvery, else a
// light one.
func (p *Prober) askAny(ctx context.Context, conn driver.Conn, since time.Time, fresh bool) (*Status, error) {
	prev := p.last
	if fresh || prev == nil || prev.Err != nil || p.lightProbes >= fullProbeEvery-1 {
		p.lightProbes = 0
		return p.ask(ctx, conn, since, fresh, nil)
	}
	st, err := p.ask(ctx, conn, since, fresh, prev)
	if err == nil && st == nil {
		// The role or the server changed: what was left out may have.
		p.lightProbes = 0
		return p.ask(ctx, conn, since, fresh, nil)
	}
	p.lightProbes++
	return st, err
}

// ask runs one probe on conn: a full one, or, given the previous
// answer, a light one that takes the system identifier and the standbys
// from it. A light probe that finds another role or another server
// returns nil: ask again, fully.
func (p *Prober) ask(ctx context.Context, conn driver.Conn, since time.Time, fresh bool, prev *Status) (*Status, error) {
	light := prev != nil
	// The round trip is timed without connection setup, which would
	// skew the latency policy's EWMA.
	start := time.Now()
	query := probe.FullSQL
	switch {
	case p.denied != 0:
		query = probe.Query(p.denied, light)
	case light:
		query = probe.LightSQL
	}
	rows, err := inner.Query(ctx, conn, query, nil)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	vals := make([]driver.Value, probe.Columns)
	if err := rows.Next(vals); err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	st := &Status{Role: Primary, Sent: start, ConnSince: since, Denied: p.denied, User: p.user}
	if !fresh {
		// The first query on a new connection also prepares the statement:
		// not a round trip worth comparing.
		st.RTT = time.Since(start)
	}
	// The server ran the query about half a round trip ago: lag samples
	// of different hosts compare better at that moment than at arrival.
	st.At = start.Add(time.Since(start) / 2)
	a, err := probe.Parse(vals)
	if err != nil {
		return nil, err
	}
	if light {
		a.Server.Sysid = prev.Sysid // left out of a light probe
	}
	if a.Replica {
		st.Role = Replica
	}
	st.LSN, st.Receive, st.Paused, st.Timeline = a.LSN, a.Receive, a.Paused, a.Timeline
	st.Sysid, st.AsyncDefault, st.ApplyDelay = a.Server.Sysid, a.AsyncDefault, a.ApplyDelay
	st.Server = a.Server
	if light && (st.Role != prev.Role || otherIncarnation(prev.Server, st.Server)) {
		return nil, nil // a failover or a restart: ask everything
	}
	if prev := p.last; prev != nil && prev.Err == nil && otherIncarnation(prev.Server, st.Server) {
		// The server restarted behind a connection that survived it (a
		// pooler's): seen here, without a failed probe.
		st.Restarted = true
	}
	if fresh && a.PID != 0 && p.cfg.BackendPID != nil {
		if wire := p.cfg.BackendPID(conn); wire != 0 && wire != a.PID {
			p.pooled = true // a pooler answered
		}
	}
	st.StatsHidden = !a.StatsVisible
	if st.Role == Replica {
		st.Receiver, st.AppName = a.Receiver, a.AppName
		st.ReceiverHidden = a.ReceiverHidden || p.denied&probe.FnWalReceiver != 0
	} else if light {
		st.SyncStates = prev.SyncStates
	} else {
		st.SyncStates = a.SyncStates
	}
	return st, nil
}

// restartedBehind reports whether cur is a later (or earlier)
// incarnation of the server prev was: the same system, address and port,
// started at another time.
func otherIncarnation(prev, cur probe.Server) bool {
	return prev.Sysid == cur.Sysid && prev.Addr == cur.Addr && prev.Port == cur.Port && prev.Started != cur.Started
}
