package pgreplica

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/puddle/v2"

	"github.com/pgreplica/pgreplica/internal/monoclock"
	"github.com/pgreplica/pgreplica/internal/pgxtrace"
	"github.com/pgreplica/pgreplica/internal/sockpeek"
	"github.com/pgreplica/pgreplica/internal/sqlstate"
)

// hostPool is the bounded pool of physical connections to one host.
// puddle (the pool under pgxpool) does the bookkeeping; this type adds the
// database/sql-style policies: max lifetime, idle timeout and a health check
// before reusing a connection that sat idle.
type hostPool struct {
	node             *node
	pool             *puddle.Pool[*physical]
	maxLifetime      time.Duration
	maxIdle          time.Duration
	healthCheckAfter time.Duration
	pingTimeout      time.Duration // of the health check; ProbeTimeout
	// password is masked in connection errors (see redactErr).
	password string
	// identify learns which server a new connection reached
	// (node.learnServer; nil in unit tests of routing, whose mock
	// connections answer only what a test expects).
	identify func(context.Context, *physical) error
	// hooks are pgx's pool hooks (PrepareConn, AfterRelease,
	// BeforeClose: pgxhooks.go), nil without Config.Pgx.
	hooks *PgxHooks

	// all holds every live physical connection (added when connected,
	// removed when destroyed: never on a statement's path), so that Close
	// finds the borrowed ones; closing is set when Close starts.
	mu      sync.Mutex
	all     map[*physical]struct{}
	closing atomic.Bool

	// idle counts the connections given back and not lent since (nor
	// destroyed):
	// tryAcquire tries the pool only when it is positive, because
	// puddle's TryAcquire on a pool with none idle dials one in the
	// background, which the read does not wait for. (Left alone, every
	// pool held a connection more than it needed, and the newest, idle
	// first, was younger than a session's last read: no affinity.)
	idle atomic.Int32
	// dialing counts the connections being made (acquireReplica).
	dialing atomic.Int32
	// monitorLent counts the borrows by the monitor (lendIdle): they are
	// no evidence of statements (statementStat). monitorBack is set
	// while the monitor holds a connection (one at a time: its probes
	// and captures take turns), and closed when it gives it back.
	monitorLent atomic.Int64
	monitorBack atomic.Pointer[chan struct{}]
	// asideMu keeps the monitor from taking idle connections aside
	// (lendIdle, reap) while a statement borrows: statements hold it
	// shared, the monitor only tries it exclusively and skips its turn
	// when it cannot have it. Without it, a statement that came while the
	// monitor held the idle connections for a moment found the pool
	// empty, and puddle dialed one more.
	asideMu sync.RWMutex

	// lost is when a connection of any of the connector's pools was last
	// found lost (a monoclock.Time; shared by them: see answeredLately).
	lost *atomic.Int64
	// trustAnswered is answeredAgo (tests lengthen it).
	trustAnswered time.Duration
}

func newHostPool(n *node, inner driver.Connector, cfg *Config, lost *atomic.Int64) (*hostPool, error) {
	hp := &hostPool{
		node:             n,
		lost:             lost,
		trustAnswered:    answeredAgo,
		maxLifetime:      cfg.ConnMaxLifetime,
		maxIdle:          cfg.ConnMaxIdleTime,
		healthCheckAfter: cfg.knobs.HealthCheckAfter,
		pingTimeout:      cfg.knobs.ProbeTimeout,
		password:         cfg.Password,
		all:              make(map[*physical]struct{}),
		identify:         n.learnServer,
		hooks:            cfg.Pgx,
	}
	timeout := cfg.ConnectTimeout
	p, err := puddle.NewPool(&puddle.Config[*physical]{
		Constructor: func(ctx context.Context) (*physical, error) {
			hp.dialing.Add(1)
			defer hp.dialing.Add(-1)
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			socks := &sockpeek.Sockets{}
			c, err := inner.Connect(sockpeek.WithSockets(ctx, socks))
			if err != nil {
				return nil, err
			}
			p := &physical{conn: c, node: n, socks: socks, wire: newWire(c)}
			if hp.identify != nil {
				if err := hp.identify(pgxtrace.Own(ctx), p); err != nil { // pgreplica's, not traced
					c.Close()
					return nil, err
				}
			}
			p.valid, _ = c.(driver.Validator)
			p.created = monoclock.Now()
			p.returned = p.created
			hp.mu.Lock()
			hp.all[p] = struct{}{}
			hp.mu.Unlock()
			return p, nil
		},
		Destructor: hp.destroy,
		MaxSize:    int32(cfg.MaxConnsPerHost),
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadConfig, err)
	}
	hp.pool = p
	return hp, nil
}

// acquire returns a healthy physical connection, replacing stale ones.
// It first looks at an idle connection's socket (one system call, never
// a round trip): a statement is not sent on a connection the server
// already ended. For a write that would make its outcome unknown; for a
// read it would cost its one retry, and when the server ended every
// session at once (an administrator, a password rotation, a restart) the
// other replica's connections are just as dead, so the read would fail.
// A read's borrow (acquireRead, tryAcquire) skips the look at a
// connection that answered a moment ago (answeredLately).
func (hp *hostPool) acquire(ctx context.Context) (*puddle.Resource[*physical], error) {
	return hp.acquireFor(ctx, false)
}

// acquireRead is acquire for a read on a replica, which takes a
// connection that answered a moment ago without looking at its socket
// (answeredLately).
func (hp *hostPool) acquireRead(ctx context.Context) (*puddle.Resource[*physical], error) {
	return hp.acquireFor(ctx, true)
}

func (hp *hostPool) acquireFor(ctx context.Context, forRead bool) (*puddle.Resource[*physical], error) {
	start := monoclock.Now()
	hp.asideMu.RLock()
	defer hp.asideMu.RUnlock()
	hp.awaitMonitor(ctx)
	for rejects := 0; ; {
		res, err := hp.pool.Acquire(ctx)
		if err != nil {
			if errors.Is(err, puddle.ErrClosedPool) {
				return nil, ErrClosed
			}
			if ctx.Err() != nil {
				return nil, hp.waitEnded(ctx, start)
			}
			hp.node.markSuspect()
			err = nameResolveFailure(hp.node.host.Addr, redactErr(err, hp.password))
			return nil, fmt.Errorf("pgreplica: connect to %w", newHostError(hp.node.name, err))
		}
		hp.uncount(res.Value())
		if !hp.usable(ctx, res, hp.pingTimeout, forRead) {
			res.Destroy()
			continue
		}
		if res, err = hp.claim(res); err != nil {
			return nil, err
		}
		if retry, err := hp.prepareConn(ctx, res); err != nil {
			return nil, err
		} else if retry {
			if rejects++; rejects > int(hp.pool.Stat().MaxResources()) {
				return nil, errPrepareConnRejects
			}
			continue
		}
		return res, nil
	}
}

// waitEnded is the error of a borrow that ctx ended (since start): the
// host, and how full its pool was.
func (hp *hostPool) waitEnded(ctx context.Context, start monoclock.Time) error {
	s := hp.pool.Stat()
	return fmt.Errorf("pgreplica: waited %v for a connection to %s (%d of pgreplica_max_conns_per_host %d in use, %d being made), until its context ended: %w",
		roundWait(monoclock.Now().Sub(start)), hp.node.name, s.AcquiredResources(), s.MaxResources(), s.ConstructingResources(), ctx.Err())
}

// tryAcquire returns an idle healthy connection if there is one at once,
// for a read: one that answered a moment ago is taken without a look at
// its socket (answeredLately). The health check of a connection that sat
// idle gives up after pingLimit.
func (hp *hostPool) tryAcquire(ctx context.Context, pingLimit time.Duration) (*puddle.Resource[*physical], bool) {
	hp.asideMu.RLock()
	defer hp.asideMu.RUnlock()
	for hp.idle.Load() > 0 {
		res, err := hp.pool.TryAcquire(ctx)
		if err != nil {
			return nil, false // taken meanwhile (puddle now dials one)
		}
		hp.uncount(res.Value())
		if !hp.usable(ctx, res, pingLimit, true) {
			res.Destroy()
			continue
		}
		if res, err = hp.claim(res); err != nil {
			return nil, false
		}
		if retry, err := hp.prepareConn(ctx, res); err != nil {
			return nil, false // acquire asks PrepareConn again, and fails
		} else if retry {
			continue
		}
		return res, true
	}
	return nil, false
}

// lendIdle lends the monitor an idle connection at once, or nil: a
// probe or capture runs on it instead of on a connection of the
// monitor's own. It never waits behind statements nor makes the pool
// dial, and skips the health check (the probe is one). Give it back
// with giveBack.
func (hp *hostPool) lendIdle() *puddle.Resource[*physical] {
	if hp.idle.Load() <= 0 || hp.closing.Load() || !hp.asideMu.TryLock() {
		return nil
	}
	defer hp.asideMu.Unlock()
	// No statement borrows now, so puddle's idle connections can only be
	// more by the time of TryAcquire. Only if there are none would it fail
	// (idle counts a connection a moment before its release), and start a
	// dial.
	if hp.pool.Stat().IdleResources() == 0 {
		return nil
	}
	res, err := hp.pool.TryAcquire(context.Background())
	if err != nil {
		return nil
	}
	hp.monitorLent.Add(1)
	hp.uncount(res.Value())
	p := res.Value()
	now := monoclock.Now()
	if hp.maxLifetime > 0 && now.Sub(p.created) > hp.maxLifetime || p.valid != nil && !p.valid.IsValid() {
		res.Destroy()
		return nil
	}
	p.lent = now
	if res, err = hp.claim(res); err != nil {
		return nil
	}
	back := make(chan struct{})
	hp.monitorBack.Store(&back)
	return res
}

// giveBack returns a connection lendIdle lent; err as for release.
func (hp *hostPool) giveBack(res *puddle.Resource[*physical], err error) {
	hp.releaseAs(res, err, false)
	if back := hp.monitorBack.Swap(nil); back != nil {
		close(*back)
	}
}

// awaitMonitor waits, while the pool has no idle connection and the
// monitor holds one, for the monitor to give it back (one round trip;
// its query gives up within ProbeTimeout), or for ctx to end: the
// statement then takes that connection instead of making the pool dial
// one more because a probe happened to run on the idle one. Only while
// the monitor holds one does it cost more than an atomic load: it asks
// puddle, not idle, whether another is idle, because the monitor counts
// the one it gives back a moment before puddle has it.
func (hp *hostPool) awaitMonitor(ctx context.Context) {
	back := hp.monitorBack.Load()
	if back == nil || hp.pool.Stat().IdleResources() > 0 {
		return
	}
	select {
	case <-*back:
	case <-ctx.Done():
	}
}

// statementStat returns how many connections statements ever borrowed
// and whether one is borrowed now: the monitor's own borrows left out.
func (hp *hostPool) statementStat() (lent int64, inUse bool) {
	s := hp.pool.Stat()
	held := int32(0)
	if hp.monitorBack.Load() != nil {
		held = 1
	}
	return s.AcquireCount() - hp.monitorLent.Load(), s.AcquiredResources() > held
}

// count and uncount keep idle: a connection given back to the pool, then
// taken from it (by a borrower or by reap).
func (hp *hostPool) count(p *physical) {
	p.idle = true
	hp.idle.Add(1)
}

func (hp *hostPool) uncount(p *physical) {
	if p.idle {
		p.idle = false
		hp.idle.Add(-1)
	}
}

// claim marks an acquired connection as borrowed.
func (hp *hostPool) claim(res *puddle.Resource[*physical]) (*puddle.Resource[*physical], error) {
	p := res.Value()
	p.res = res
	p.owner.Store(ownerBorrower)
	if hp.closing.Load() {
		// Close started: it either saw this borrow (and took the
		// connection) or will wait for it; give it back either way.
		hp.release(res, nil)
		return nil, ErrClosed
	}
	return res, nil
}

// usable reports whether the idle connection res may be lent, and readies
// it. forRead: it is for a read, which may skip the look at its socket
// when the connection answered a moment ago (answeredLately).
func (hp *hostPool) usable(ctx context.Context, res *puddle.Resource[*physical], pingLimit time.Duration, forRead bool) bool {
	now := monoclock.Now()
	if hp.maxLifetime > 0 && now.Sub(res.Value().created) > hp.maxLifetime {
		return false
	}
	c := res.Value().conn
	if v := res.Value().valid; v != nil && !v.IsValid() {
		return false
	}
	if p := res.Value(); !(forRead && hp.answeredLately(p, now)) && !p.wire.live(p.socks) {
		// The server ended this connection while it sat idle (a restart,
		// a failover, an administrator): a statement sent on it would fail
		// after it was sent (see acquire).
		// The monitor may not know yet. A server back from a restart may
		// have replayed less than it had: forget what was known of its
		// replay, so that no read trusts it before it is read again.
		hp.noteLost()
		hp.node.replay.Store(0)
		hp.node.poke()
		return false
	}
	if hp.healthCheckAfter >= 0 && now.Sub(res.Value().returned) > hp.healthCheckAfter {
		if p, ok := c.(driver.Pinger); ok {
			if ping(ctx, res.Value(), p, pingLimit) != nil {
				hp.node.poke() // the monitor may not know yet
				return false
			}
			now = monoclock.Now()
		}
	}
	res.Value().lent = now
	return true
}

// answeredAgo is how recently a connection must have answered for a read
// to take it without looking at its socket. The look is a system call
// (1–2 µs here, about 2 % of a loopback read); a connection that answered
// within answeredAgo can have been ended since only in a window no longer
// than a read's own flight, and a read that fails so before any row is
// sent again (route's retry): a write, whose outcome would be unknown,
// always looks.
const answeredAgo = time.Millisecond

// answeredLately reports whether p answered (was given back) within
// answeredAgo before now, and after the connector last found a connection
// lost. The second condition is what makes the retry safe: when a server
// or a pooler ended every session at once, the read that met the first
// dead connection notes it (noteLost), and the retry, on this node or
// another, looks at every connection given back before that.
func (hp *hostPool) answeredLately(p *physical, now monoclock.Time) bool {
	return now.Sub(p.returned) < hp.trustAnswered && int64(p.returned) > hp.lost.Load()
}

// noteLost records that a connection of this connector was found lost.
func (hp *hostPool) noteLost() {
	now := int64(monoclock.Now())
	for old := hp.lost.Load(); old < now && !hp.lost.CompareAndSwap(old, now); old = hp.lost.Load() {
	}
}

// ping checks a connection that sat idle, for no longer than limit and
// ctx allow. The bound is enforced by closing the connection's socket: an
// inner driver may wait for a frozen server past its context (lib/pq
// blocks in its read, and its cancel request goes unanswered).
func ping(ctx context.Context, p *physical, pinger driver.Pinger, limit time.Duration) error {
	pctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	stop := context.AfterFunc(pctx, func() { p.socks.Close() })
	defer stop()
	return pinger.Ping(pctx)
}

// errNotPrimaryConn is why a connection to the primary's address was not
// used (tryLeasePrimary), and the pool closes it: its server was in
// recovery when it was made.
var errNotPrimaryConn = errors.New("a new connection reached a server in recovery")

// release gives a connection back. A connection that failed in a way that
// leaves it unusable, or that carries session state, is closed.
func (hp *hostPool) release(res *puddle.Resource[*physical], err error) {
	hp.releaseAs(res, err, true)
}

// releaseAs is release; a statement's give-back (byStatement) runs
// AfterRelease, the monitor's does not.
func (hp *hostPool) releaseAs(res *puddle.Resource[*physical], err error, byStatement bool) {
	p := res.Value()
	p.returned = monoclock.Now()
	if !p.owner.CompareAndSwap(ownerBorrower, ownerPool) {
		// Close took it from us (see close): its sockets are closed and
		// the pool has forgotten it; only the driver conn is left to free.
		hp.closePhysical(p)
		return
	}
	switch {
	case err == nil:
	case sqlstate.ServerGone(err):
		// The server went away or cut us off (a restart, a failover, a
		// network fault): its idle siblings are most likely dead too and
		// would each fail one more statement.
		hp.noteLost()
		res.Destroy()
		hp.pool.Reset()
		return
	case errors.Is(err, driver.ErrBadConn) || sqlstate.ConnLost(err) || errors.Is(err, context.Canceled),
		errors.Is(err, errNotPrimaryConn):
		// A statement its context cancelled: pgx closed the connection
		// (and says context.Canceled alone), lib/pq marked it bad; or a
		// connection to the primary's address that reached a replica.
		// (A hedge's loser is noted too: rare, and a note costs only the
		// looks at the connections given back before it.)
		if !errors.Is(err, context.Canceled) && !errors.Is(err, errNotPrimaryConn) {
			hp.noteLost()
		}
		res.Destroy()
		return
	}
	if p.valid != nil && !p.valid.IsValid() || hp.node.retired.Load() {
		res.Destroy()
		return
	}
	if p.dirty {
		// DISCARD ALL would also deallocate the statements the inner driver
		// cached on this connection (pgx would then fail on them), so a
		// connection with session state is closed instead: session state
		// is rare, a reconnect is cheap next to leaking a search_path.
		res.Destroy()
		return
	}
	if byStatement && hp.afterRelease(res) {
		return
	}
	hp.count(p)
	res.Release()
}

// reap closes connections idle or alive too long. The monitor calls it.
func (hp *hostPool) reap() {
	if !hp.asideMu.TryLock() {
		return // a statement is borrowing: next time
	}
	defer hp.asideMu.Unlock()
	// puddle hands the idle connections out newest first, and each one
	// given back goes on top: give them back oldest first, so that the
	// next statement still gets the newest (warm: no ping, its prepared
	// statements) and not, after every probe, the coldest.
	all := hp.pool.AcquireAllIdle()
	for _, res := range slices.Backward(all) {
		hp.uncount(res.Value())
		expired := hp.maxLifetime > 0 && time.Since(res.CreationTime()) > hp.maxLifetime
		idle := hp.maxIdle > 0 && res.IdleDuration() > hp.maxIdle
		if expired || idle || hp.node.retired.Load() {
			res.Destroy()
		} else {
			hp.count(res.Value())
			res.ReleaseUnused()
		}
	}
}

// reaches reports whether the pool holds a live connection, idle or
// borrowed, to server srv. It walks every connection: only a check that
// missed srv behind an endpoint asks (visibility.go).
func (hp *hostPool) reaches(srv *server) bool {
	hp.mu.Lock()
	defer hp.mu.Unlock()
	for p := range hp.all {
		if p.srv == srv {
			return true
		}
	}
	return false
}

// close closes every connection of the pool at once, like database/sql
// does with pgx or lib/pq (db.Close closes the idle connections and returns;
// those inner drivers' connectors have nothing else to close): it does not
// wait for connections the application still holds through rows it never
// closed or a transaction it left open. puddle's Pool.Close would wait for
// those, so close takes them from their borrower first: it closes their
// sockets (safe while the borrower's goroutine uses the driver conn; that
// use then fails at once) and hands them to puddle for destruction. The
// borrower frees the driver conn when it gives the connection back (see
// release). close reports how many connections it took.
func (hp *hostPool) close() int {
	hp.closing.Store(true)
	hp.mu.Lock()
	var borrowed []*physical
	for p := range hp.all {
		// A borrow that acquire marks after this point sees closing
		// and gives the connection back itself.
		if p.owner.CompareAndSwap(ownerBorrower, ownerOrphan) {
			borrowed = append(borrowed, p)
		}
	}
	hp.mu.Unlock()
	for _, p := range borrowed {
		// Destroy only reads the resource's state, as the borrower's
		// Value() does; the destructor (destroy) sees ownerOrphan and
		// closes the sockets only.
		p.res.Destroy()
	}
	hp.pool.Close()
	return len(borrowed)
}

// destroy is the pool's destructor. A connection Close took from a
// borrower may still be in use on another goroutine: only its sockets are
// closed here (net.Conn allows that concurrently); the borrower closes the
// driver conn when it comes back. An inner driver that dialed nothing
// pgreplica saw (a test double) gets its conn closed instead.
func (hp *hostPool) destroy(p *physical) {
	hp.uncount(p) // a Reset destroys idle ones
	hp.mu.Lock()
	delete(hp.all, p)
	hp.mu.Unlock()
	if p.owner.Load() == ownerOrphan && p.socks.Close() {
		return
	}
	hp.closePhysical(p)
}

// pgxConnOfWire returns p's pgx connection, or nil when its inner driver
// is not pgx.
func pgxConnOfWire(p *physical) *pgx.Conn {
	if w, ok := p.wire.(*pgxWire); ok {
		return w.conn
	}
	return nil
}

// errPrepareConnRejects: PrepareConn rejected (false, nil) more
// connections in a row than the pool holds, as pgxpool bounds it.
var errPrepareConnRejects = errors.New("pgreplica: PrepareConn rejected every connection it was given")

// prepareConn runs PrepareConn on a connection just claimed for a
// statement: lend it (false, nil); retry with another, this one closed;
// or fail the borrow with err, the connection given back or closed as
// PrepareConn said.
func (hp *hostPool) prepareConn(ctx context.Context, res *puddle.Resource[*physical]) (retry bool, err error) {
	conn := pgxConnOfWire(res.Value())
	if hp.hooks == nil || hp.hooks.PrepareConn == nil || conn == nil {
		return false, nil
	}
	ok, err := hp.hooks.PrepareConn(ctx, conn)
	switch {
	case ok && err == nil:
		return false, nil
	case ok:
		hp.releaseAs(res, nil, false)
		return false, err
	case err != nil:
		hp.releaseAs(res, driver.ErrBadConn, false)
		return false, err
	default:
		hp.releaseAs(res, driver.ErrBadConn, false)
		return true, nil
	}
}

// afterRelease runs AfterRelease, when set, on a connection a statement
// gave back that would go back to the pool, on a goroutine of its own (as
// pgxpool does), and reports whether it took the connection over.
func (hp *hostPool) afterRelease(res *puddle.Resource[*physical]) bool {
	p := res.Value()
	conn := pgxConnOfWire(p)
	if hp.hooks == nil || hp.hooks.AfterRelease == nil || conn == nil {
		return false
	}
	go func() {
		if !hp.hooks.AfterRelease(conn) {
			res.Destroy()
			return
		}
		hp.count(p)
		res.Release()
	}()
	return true
}

// closePhysical closes a pooled connection's driver conn (once), after
// BeforeClose.
func (hp *hostPool) closePhysical(p *physical) {
	if conn := pgxConnOfWire(p); conn != nil && hp.hooks != nil && hp.hooks.BeforeClose != nil {
		p.closeOnce.Do(func() {
			hp.hooks.BeforeClose(conn)
			p.conn.Close()
		})
		return
	}
	p.closeConn()
}

// roundWait rounds a wait for a message: to the millisecond, to the
// microsecond below one.
func roundWait(d time.Duration) time.Duration {
	if d < time.Millisecond {
		return d.Round(time.Microsecond)
	}
	return d.Round(time.Millisecond)
}
