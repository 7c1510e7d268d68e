package pgreplica

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/puddle/v2"

	"github.com/pgreplica/pgreplica/internal/inner"
	"github.com/pgreplica/pgreplica/internal/marks"
	"github.com/pgreplica/pgreplica/internal/pgxtrace"
	"github.com/pgreplica/pgreplica/internal/probe"
	"github.com/pgreplica/pgreplica/internal/sockpeek"
	"github.com/pgreplica/pgreplica/internal/sqlstate"
)

// Probing: a prober watches one server address for the whole process,
// with one probe loop, whatever the number of handles on the cluster (a
// name with several addresses has a prober per address, resolve.go). Probes and
// captures of write positions run on an idle connection of the handles'
// pools when one is, else on the prober's own connection (see onPooled).
// Every *sql.DB and pgreplicapgx.Pool opened on the same connection
// string (an ORM's second handle, a migration tool, a health checker)
// subscribes its node to the same prober, which probes as often as its
// busiest subscriber needs and hands each answer to every one of them.
// So a process costs each server one probe per interval, not one per
// handle, and, while its pools hold a connection there, no connection
// beyond them. The registry of probers is package state, as the process
// watermarks are (watermark.go), and for the same reason: what it
// watches is the process's, not a handle's.
var processProbers = proberRegistry{probers: map[proberKey]*prober{}}

// proberKey is what makes two nodes' probes the same: the inner driver,
// the connection string it opens (credentials included: two roles may see
// different things), and the settings of the probe itself. How often to
// probe is not in it: a shared prober probes as often as its busiest
// subscriber asks.
type proberKey struct {
	driver                  InnerDriver
	dsn                     string
	pin                     string // the address it dials (node.pin)
	connectTimeout, timeout time.Duration
	fullProbes              bool
	// pgx is what else the connections are made from (PgxHooks.monitorKey).
	pgx any
}

type proberRegistry struct {
	mu      sync.Mutex
	probers map[proberKey]*prober
}

// acquire returns the running prober for key, starting one with newProber
// when there is none; release it when done.
func (r *proberRegistry) acquire(key proberKey, newProber func() *prober) *prober {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.probers[key]; p != nil {
		p.refs++
		return p
	}
	p := newProber()
	p.key, p.refs, p.registry = key, 1, r
	r.probers[key] = p
	p.start()
	return p
}

// release drops a reference; the last one stops the prober and closes its
// connection before it returns.
func (r *proberRegistry) release(p *prober) {
	r.mu.Lock()
	p.refs--
	last := p.refs == 0
	if last {
		delete(r.probers, p.key)
	}
	r.mu.Unlock()
	if last {
		p.stop()
	}
}

// prober probes one address and hands every answer to its subscribers.
type prober struct {
	key      proberKey
	registry *proberRegistry // nil: private to one node (unit tests)
	refs     int             // guarded by registry.mu

	inner driver.Connector
	// probeFn runs one probe: p.probe, or a unit test's stand-in.
	probeFn func(context.Context) *nodeStatus

	// wakeCh asks for an early probe.
	wakeCh chan struct{}
	// started counts probes sent; a probe's answer carries its count
	// (nodeStatus.seq), so a subscriber can wait for one sent after it
	// asked (monitor.refresh).
	started atomic.Uint64
	// capturedAt is when a capture last read the primary's position on
	// the probe connection (unix ns; see captureStandsIn).
	capturedAt atomic.Int64

	// mu guards subs and serialises handing answers to them.
	mu   sync.Mutex
	subs []subscriber

	cancel context.CancelFunc
	done   chan struct{}

	// lock guards conn and what belongs to it (connAt, socks, failed,
	// denied, user, pooled): the loop holds it for a probe, a capture
	// while it borrows the connection (queryLSN). What follows lock
	// belongs to the loop.
	lock   connLock
	conn   driver.Conn
	connAt time.Time
	// connUsed is when conn last served a probe or capture (reapOwnConn).
	connUsed time.Time
	// socks are conn's sockets, closed when a probe times out.
	socks sockpeek.Sockets
	// failed is why a borrowed probe connection was closed when the
	// server did not answer in a probe's time: the next probe reports it
	// rather than connect again first.
	failed error
	// denied and user are what checkPrivileges found when conn connected;
	// pooled is set once a pooler answered on it (server.go).
	denied probe.Fn
	user   string
	pooled bool

	// last is the latest answer; failures counts failed probes in a row;
	// lent is lentCount at the last look (trafficStandsIn).
	last     *nodeStatus
	failures int
	lent     int64
	// lightProbes counts the light probes since the last full one;
	// fullProbes makes every probe full (ExcludeSyncStandby needs the
	// standbys' sync states as they are).
	lightProbes int
	fullProbes  bool
}

// subscriber is a node of one connector, given every answer.
type subscriber struct {
	n *node
	m *monitor
}

func newProber(inner driver.Connector, fullProbes bool) *prober {
	p := &prober{inner: inner, fullProbes: fullProbes, wakeCh: make(chan struct{}, 1), lock: newConnLock()}
	p.probeFn = p.probe
	return p
}

func (p *prober) start() {
	ctx, cancel := context.WithCancel(pgxtrace.Own(context.Background())) // no AfterConnect, no tracing
	p.cancel, p.done = cancel, make(chan struct{})
	go func() {
		defer close(p.done)
		p.loop(ctx)
	}()
}

// stop ends the loop and waits until it closed the connection.
func (p *prober) stop() {
	p.cancel()
	<-p.done
}

// subscribe adds n, whose next answer will be one sent after this call:
// a handle opened now must not start from an older view (markStart).
func (p *prober) subscribe(n *node, m *monitor) {
	p.mu.Lock()
	p.subs = append(p.subs, subscriber{n: n, m: m})
	p.mu.Unlock()
	p.poke()
}

// unsubscribe removes n; once it returns, n gets no more answers.
func (p *prober) unsubscribe(n *node) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, s := range p.subs {
		if s.n == n {
			p.subs = append(p.subs[:i:i], p.subs[i+1:]...)
			return
		}
	}
}

// poke asks for an early probe without blocking.
func (p *prober) poke() {
	select {
	case p.wakeCh <- struct{}{}:
	default:
	}
}

func (p *prober) loop(ctx context.Context) {
	defer func() {
		p.lock.lock(context.Background()) // a capture ends within a probe timeout
		p.closeConn()
		p.lock.unlock()
	}()
	var probed time.Time // when the last probe was sent
	// The first probe goes at once, on a new connection (no round trip
	// measured); the first subscriber's poke sends a second right behind
	// it, which measures one for latency-based selection.
	poked := true
	for {
		wait, busy, idle := p.intervals()
		var lent int64
		if p.last != nil && p.last.role == rolePrimary {
			lent = p.lentCount() // only the primary's traffic stands in
		}
		if poked || !p.captureStandsIn(probed, busy, idle) && !p.trafficStandsIn(probed, idle, lent) {
			probed = time.Now()
			if !p.probeOnce(ctx) {
				return
			}
		}
		p.lent = lent
		if p.failures > 1 {
			// Banned: probe a failing host less often, up to a cap.
			wait = min(wait<<min(p.failures-1, 10), maxProbeBackoff)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
			poked = false
		case <-p.wakeCh:
			t.Stop()
			poked = true
		}
	}
}

// intervals returns how long to wait for the next probe (the shortest any
// subscriber asks: MonitorInterval while its statements run, its
// IdleMonitorInterval while they do not) and the shortest of each setting.
func (p *prober) intervals() (wait, busy, idle time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.subs) == 0 {
		return defaultMonitorInterval, defaultMonitorInterval, defaultMonitorInterval
	}
	for i, s := range p.subs {
		set := &s.m.settings
		w := set.interval
		if s.m.idleFor() >= set.interval {
			w = set.idleInterval
		}
		if i == 0 {
			wait, busy, idle = w, set.interval, set.idleInterval
			continue
		}
		wait, busy, idle = min(wait, w), min(busy, set.interval), min(idle, set.idleInterval)
	}
	return wait, busy, idle
}

// captureStandsIn reports whether the primary's probe due now may be left
// out: a capture read the primary's position on the probe connection
// within the last interval (statements run, so traffic shows the primary
// answering, and the capture's position is a sample of the lag tracker,
// as the probe's would be), and the last probe was sent less than
// standInLimit ago: role, timeline and the rest are still read that
// often. A poke (a failed statement, a refresh) always probes.
func (p *prober) captureStandsIn(probed time.Time, busy, idle time.Duration) bool {
	prev := p.last
	if prev == nil || prev.err != nil || prev.role != rolePrimary {
		return false
	}
	now := time.Now()
	at := p.capturedAt.Load()
	return now.Sub(probed) < standInLimit(idle) && at != 0 && time.Duration(now.UnixNano()-at) < busy
}

// standInLimit is how long traffic or captures may stand in for the
// primary's probes: two idle intervals. What only a probe reads of a
// primary that answers statements (its role, timeline, standbys, default
// synchronous_commit) changes by a failover or an operator's hand; a
// failover fails its statements, which poke a probe at once, and the
// replicas' probes find the new primary. A busy process then costs the
// primary a probe every two seconds by default, half of an idle one's.
func standInLimit(idle time.Duration) time.Duration { return 2 * idle }

// trafficStandsIn reports whether the primary's probe due now may be left
// out because statements ran on it since the last look (its pools lent
// connections: lent moved): a primary that answers them is up, and one
// that fails a statement is poked at once. The probe still goes once
// standInLimit, for its role, timeline and a lag sample, and a write's
// position is read when something needs it, not by probes. Replicas are
// probed at the busy rate: their replay positions route reads.
func (p *prober) trafficStandsIn(probed time.Time, idle time.Duration, lent int64) bool {
	prev := p.last
	if prev == nil || prev.err != nil || prev.role != rolePrimary {
		return false
	}
	return lent != p.lent && time.Since(probed) < standInLimit(idle)
}

// lentCount sums the connections the subscribers' pools on this address
// ever lent.
func (p *prober) lentCount() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var lent int64
	for _, s := range p.subs {
		if s.n.pool != nil {
			l, _ := s.n.pool.statementStat()
			lent += l
		}
	}
	return lent
}

// probeOnce probes once and hands the answer to every subscriber; false:
// the prober is stopping.
func (p *prober) probeOnce(ctx context.Context) bool {
	// A probe of the primary reads its position after every write
	// that took a ticket before it was sent: it covers them for free.
	var covers marks.Probe
	if prev := p.last; prev != nil && prev.role == rolePrimary && prev.err == nil && prev.sysid != 0 {
		covers = marks.Of(prev.sysid).Probing()
	}
	// A probe on the open connection gets ProbeTimeout: a host that
	// stops answering is down that long after the probe was sent. The
	// timeout closes the socket, because lib/pq answers a cancelled
	// context by asking the server to cancel, which a frozen server
	// never does. A capture borrowing the connection is waited for
	// (it too ends within ProbeTimeout).
	if p.lock.lock(ctx) != nil {
		return false
	}
	timeout := p.key.timeout
	if p.conn == nil {
		timeout += p.key.connectTimeout
	}
	seq := p.started.Add(1)
	pctx, cancel := context.WithTimeout(ctx, timeout)
	stop := context.AfterFunc(pctx, func() { p.socks.Close() })
	st := p.probeFn(pctx)
	if !stop() {
		p.closeConn() // its socket may be closed
		if st.err != nil && ctx.Err() == nil {
			st.err = fmt.Errorf("no answer to the probe within %v: %w", timeout, st.err)
		}
	}
	cancel()
	st.seq, st.pooled = seq, p.pooled
	p.lock.unlock()
	if st.err == nil && st.role == rolePrimary {
		covers.Probed(uint64(st.lsn)) // the marks decide what it covers
	}
	if ctx.Err() != nil {
		return false
	}
	if st.err != nil {
		p.failures++
	} else {
		p.failures = 0
	}
	p.last = st
	p.mu.Lock()
	for _, s := range p.subs {
		s.m.apply(s.n, st)
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
func (p *prober) probe(ctx context.Context) *nodeStatus {
	var st *nodeStatus
	var err error
	if p.failed == nil {
		var lent bool
		st, lent, err = p.probePooled(ctx)
		switch {
		case lent && err == nil:
			p.reapOwnConn()
			return st
		case lent && (errors.Is(err, context.DeadlineExceeded) || !sqlstate.ConnLost(err) || ctx.Err() != nil):
			return &nodeStatus{err: err, at: time.Now()}
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
		return &nodeStatus{err: err, at: time.Now()}
	}
	return st
}

// probeAfterLost probes on a new connection after the one probed on
// died. A server back from a restart may have replayed less than it had
// (crash recovery stops at its last restartpoint's consistent point):
// what was known of its replay must be forgotten, as after a failed
// probe.
func (p *prober) probeAfterLost(ctx context.Context) *nodeStatus {
	p.closeConn()
	st, err := p.probeConn(ctx)
	if err != nil {
		p.closeConn()
		return &nodeStatus{err: err, at: time.Now()}
	}
	st.restarted = true
	return st
}

// probePooled probes on an idle connection of a subscriber's pool
// (onPooled), within ProbeTimeout. lent: one was lent.
func (p *prober) probePooled(ctx context.Context) (st *nodeStatus, lent bool, err error) {
	lent, err = p.onPooled(ctx, p.key.timeout, func(ctx context.Context, pc *physical) error {
		var err error
		st, err = p.askAny(ctx, pc.conn, pc.created.Wall(), false)
		return err
	})
	return st, lent, err
}

// ownConnIdle is how long the probe connection may go unused while
// pooled connections serve the probes and captures before it is closed:
// a process then holds no connection beyond what its pools need.
const ownConnIdle = 5 * time.Second

// reapOwnConn closes the probe connection once unused for ownConnIdle.
func (p *prober) reapOwnConn() {
	if time.Since(p.connUsed) > ownConnIdle {
		p.closeConn()
	}
}

// closeConn closes the probe connection, if open, and forgets it.
func (p *prober) closeConn() {
	if p.conn != nil {
		p.conn.Close()
		p.conn = nil
	}
}

// onPooled runs f on an idle connection a subscriber's pool lends at
// once (hostPool.lendIdle), within timeout, and gives it back; lent
// reports whether one was lent (none idle: the caller uses the probe
// connection). A statement that wants it meanwhile waits for it
// (hostPool.awaitMonitor) when the pool has no other idle. Only once the probe connection has
// read the role's privileges (they are the same on every connection of
// the DSN) does a probe go on a pooled one. Like a probe, f is bounded by
// closing the connection's socket.
func (p *prober) onPooled(ctx context.Context, timeout time.Duration, f func(context.Context, *physical) error) (lent bool, err error) {
	if p.user == "" {
		return false, nil
	}
	var hp *hostPool
	var res *puddle.Resource[*physical]
	p.mu.Lock()
	for _, s := range p.subs {
		if s.n.pool != nil {
			if res = s.n.pool.lendIdle(); res != nil {
				hp = s.n.pool
				break
			}
		}
	}
	p.mu.Unlock()
	if res == nil {
		return false, nil
	}
	pc := res.Value()
	qctx, cancel := context.WithTimeout(ctx, timeout)
	stop := context.AfterFunc(qctx, func() { pc.socks.Close() })
	err = f(qctx, pc)
	if !stop() {
		// Its socket may be closed: the pool drops it (ErrBadConn).
		if ctx.Err() == nil {
			err = fmt.Errorf("no answer to the probe within %v: %w", timeout, errors.Join(qctx.Err(), driver.ErrBadConn))
		} else {
			err = errors.Join(ctx.Err(), driver.ErrBadConn)
		}
	}
	cancel()
	hp.giveBack(res, err)
	return true, err
}

func (p *prober) probeConn(ctx context.Context) (*nodeStatus, error) {
	fresh := p.conn == nil
	if err := p.failed; err != nil {
		p.failed = nil
		return nil, err
	}
	if fresh {
		p.socks.Reset()
		c, err := p.inner.Connect(sockpeek.WithSockets(ctx, &p.socks))
		if err != nil {
			return nil, err
		}
		p.conn, p.connAt = c, time.Now()
		// Grants on functions change rarely: checked once per connection
		// (a failed probe reconnects, and so checks again).
		if p.denied, p.user, err = checkPrivileges(ctx, c); err != nil {
			return nil, err
		}
	}
	if req := p.denied & probe.RequiredFns; req != 0 {
		return nil, deniedError(p.user, req)
	}
	p.connUsed = time.Now()
	return p.askAny(ctx, p.conn, p.connAt, fresh)
}

// askAny runs one probe on conn, open since since: a full one on a fresh
// connection, after a failure and one time in fullProbeEvery, else a
// light one.
func (p *prober) askAny(ctx context.Context, conn driver.Conn, since time.Time, fresh bool) (*nodeStatus, error) {
	prev := p.last
	if fresh || p.fullProbes || prev == nil || prev.err != nil || p.lightProbes >= fullProbeEvery-1 {
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
func (p *prober) ask(ctx context.Context, conn driver.Conn, since time.Time, fresh bool, prev *nodeStatus) (*nodeStatus, error) {
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
	st := &nodeStatus{role: rolePrimary, sent: start, connSince: since, denied: p.denied, user: p.user}
	if !fresh {
		// The first query on a new connection also prepares the statement:
		// not a round trip worth comparing.
		st.rtt = time.Since(start)
	}
	// The server ran the query about half a round trip ago: lag samples
	// of different hosts compare better at that moment than at arrival.
	st.at = start.Add(time.Since(start) / 2)
	a, err := probe.Parse(vals)
	if err != nil {
		return nil, err
	}
	if light {
		a.Server.Sysid = prev.sysid // left out of a light probe
	}
	if a.Replica {
		st.role = roleReplica
	}
	st.lsn, st.receive, st.paused, st.timeline = LSN(a.LSN), LSN(a.Receive), a.Paused, a.Timeline
	st.sysid, st.asyncDefault, st.applyDelay = a.Server.Sysid, a.AsyncDefault, a.ApplyDelay
	st.id = serverIDOf(a.Server)
	if light && (st.role != prev.role || prev.id.sameServer(st.id) && prev.id.started != st.id.started) {
		return nil, nil // a failover or a restart: ask everything
	}
	if prev := p.last; prev != nil && prev.err == nil && prev.id.sameServer(st.id) && prev.id.started != st.id.started {
		// The server restarted behind a connection that survived it (a
		// pooler's): seen here, without a failed probe.
		st.restarted = true
	}
	if fresh && a.PID != 0 {
		if wire := newWire(conn).backendPID(); wire != 0 && wire != a.PID {
			p.pooled = true // a pooler answered: see server.go
		}
	}
	st.statsHidden = !a.StatsVisible
	if st.role == roleReplica {
		st.receiver, st.appName = a.Receiver, a.AppName
		st.receiverHidden = a.ReceiverHidden || p.denied&probe.FnWalReceiver != 0
	} else if light {
		st.syncStates = prev.syncStates
	} else {
		st.syncStates = a.SyncStates
	}
	return st, nil
}

// The probe connection is shared: the prober's loop holds it for each
// probe, and a capture of the primary's position (capture.go) borrows
// it between probes instead of keeping a connection of its own; both
// prefer an idle pooled connection (onPooled), and the probe connection
// is closed once those served for ownConnIdle. A process then holds no
// connection on a server beyond what its pools need while they hold one
// there, and one otherwise, whatever it writes and however many handles
// it opened.

// connLock is a mutex a waiter can give up on when its context ends.
type connLock chan struct{}

func newConnLock() connLock { return make(connLock, 1) }

func (l connLock) lock(ctx context.Context) error {
	select {
	case l <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l connLock) unlock() { <-l }

// errNoProbeConn: the node has no open probe connection to lend (before
// its first probe, after a failed one, or after Close).
var errNoProbeConn = errors.New("pgreplica: no probe connection open")

// queryLSN runs query, which returns one position, on the probe
// connection, and returns the position with when the server
// read it (a lag-tracker sample, as a probe's). It waits for a probe under way, and gives the
// query the probe timeout: a primary that does not answer a one-value
// SELECT in that time would fail its next probe too, and the monitor must
// not wait longer than a probe's time to send one. Such a timeout counts
// as a failed probe (probeOnce reports it): a frozen primary is marked
// down as soon as if a probe had found it.
func (p *prober) queryLSN(ctx context.Context, query string, timeout time.Duration) (lsn LSN, at time.Time, err error) {
	if err := p.lock.lock(ctx); err != nil {
		return 0, time.Time{}, err
	}
	defer p.lock.unlock()
	if p.failed == nil {
		start := time.Now()
		lent, err := p.onPooled(ctx, timeout, func(ctx context.Context, pc *physical) error {
			var err error
			lsn, err = queryLSN(ctx, pc.conn, query)
			return err
		})
		switch {
		case lent && err == nil:
			at = start.Add(time.Since(start) / 2) // as below
			p.capturedAt.Store(at.UnixNano())
			return lsn, at, nil
		case lent && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
			p.failed = err // as below
			p.poke()
			return 0, time.Time{}, err
		case lent && (!sqlstate.ConnLost(err) || ctx.Err() != nil):
			return 0, time.Time{}, err
		} // else none idle, or it died: the probe connection's turn
	}
	if p.conn == nil {
		return 0, time.Time{}, errNoProbeConn
	}
	p.connUsed = time.Now()
	qctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// As for a probe: closing the socket is the one way to stop lib/pq
	// waiting for a server that answers nothing.
	stop := context.AfterFunc(qctx, func() { p.socks.Close() })
	start := time.Now()
	lsn, err = queryLSN(qctx, p.conn, query)
	if stop() && err == nil {
		// Read by the server about half a round trip before the
		// answer arrived, as for a probe.
		at = start.Add(time.Since(start) / 2)
		p.capturedAt.Store(at.UnixNano())
		return lsn, at, nil
	}
	p.closeConn()
	if ctx.Err() == nil && qctx.Err() != nil {
		err = fmt.Errorf("no answer within %v to a read of the primary's position: %w", timeout, qctx.Err())
		p.failed = err
	}
	p.poke()
	return 0, time.Time{}, err
}
