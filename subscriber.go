package pgreplica

import (
	"context"
	"database/sql/driver"
	"time"

	"github.com/jackc/puddle/v2"

	"github.com/pgreplica/pgreplica/internal/prober"
)

// A handle's nodes subscribe to their addresses' probers
// (internal/prober) for as long as its monitor runs. A node as a
// subscriber takes each answer into the monitor, says how often the
// handle wants probes, and lends the prober idle connections of its
// pool. The prober calls it per probe or capture, never per statement.

// subscriber is one node of m as its prober sees it (prober.Subscriber).
type subscriber struct {
	n *node
	m *monitor
}

var (
	_ prober.Subscriber = subscriber{}
	_ prober.Lent       = lentConn{}
)

// run subscribes every node to its prober and returns when ctx ends and
// every node unsubscribed: from then on no answer reaches the handle.
func (m *monitor) run(ctx context.Context) {
	m.started = time.Now()
	m.membersMu.Lock()
	for _, n := range m.nodeList() {
		if !n.retired.Load() {
			m.subscribe(n)
		}
	}
	m.subscribed = true // resolve.go subscribes the nodes it adds
	m.membersMu.Unlock()
	<-ctx.Done()
	m.membersMu.Lock()
	m.subscribed, m.stopped = false, true
	for _, n := range m.nodeList() {
		if !n.retired.Load() {
			m.unsubscribe(n)
		}
	}
	m.membersMu.Unlock()
}

// subscribe subscribes n to its prober: its next answer will be one sent
// after the call (guarded by membersMu).
func (m *monitor) subscribe(n *node) { n.prober.Subscribe(subscriber{n: n, m: m}) }

// unsubscribe removes n from its prober; once it returns, n gets no more
// answers (guarded by membersMu).
func (m *monitor) unsubscribe(n *node) { n.prober.Unsubscribe(subscriber{n: n, m: m}) }

// Apply takes the prober's answer into the monitor.
func (s subscriber) Apply(st *prober.Status) { s.m.apply(s.n, st) }

// Intervals are the handle's MonitorInterval and IdleMonitorInterval,
// and which of them it asks for now: the idle one once its pools have
// lent no connection for a MonitorInterval.
func (s subscriber) Intervals() (now, busy, idle time.Duration) {
	set := &s.m.settings
	now = set.interval
	if s.m.idleFor() >= set.interval {
		now = set.idleInterval
	}
	return now, set.interval, set.idleInterval
}

// LendIdle lends the prober an idle connection of n's pool, or nil.
func (s subscriber) LendIdle() prober.Lent {
	if s.n.pool == nil {
		return nil
	}
	res := s.n.pool.lendIdle()
	if res == nil {
		return nil
	}
	return lentConn{hp: s.n.pool, res: res}
}

// Statements counts the connections n's pool ever lent to statements.
func (s subscriber) Statements() int64 {
	if s.n.pool == nil {
		return 0
	}
	lent, _ := s.n.pool.statementStat()
	return lent
}

// lentConn is a pooled connection lent to the prober (prober.Lent).
type lentConn struct {
	hp  *hostPool
	res *puddle.Resource[*physical]
}

func (l lentConn) Conn() driver.Conn  { return l.res.Value().conn }
func (l lentConn) Since() time.Time   { return l.res.Value().created.Wall() }
func (l lentConn) CloseSockets()      { l.res.Value().socks.Close() }
func (l lentConn) GiveBack(err error) { l.hp.giveBack(l.res, err) }

// proberConfig is what n's prober is made with besides its key: n's
// inner connector, the wire's start-up process id, the root's error for
// a role that may not use what the router needs, and the default
// MonitorInterval for while no handle subscribes.
func (n *node) proberConfig() prober.Config {
	return prober.Config{Connector: n.inner, BackendPID: backendPID, Denied: deniedError, Interval: defaultMonitorInterval}
}

// backendPID is the process id the server reported at start-up on c (0:
// the driver does not say).
func backendPID(c driver.Conn) uint32 { return newWire(c).backendPID() }
