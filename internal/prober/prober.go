// Package prober watches server addresses for the whole process: one
// probe loop per address, whatever the number of handles on the cluster
// (a name with several addresses has a prober per address). Probes and
// captures of the primary's position run on an idle connection of the
// handles' pools when one is, else on the prober's own connection.
//
// Every *sql.DB and pgreplicapgx.Pool opened on the same connection
// string (an ORM's second handle, a migration tool, a health checker)
// subscribes its node to the same prober (Acquire, Subscribe), which
// probes as often as its busiest subscriber needs and hands each answer
// (a Status) to every one of them. So a process costs each server one
// probe per interval, not one per handle, and, while its pools hold a
// connection there, no connection beyond them.
//
// A prober meets the handles through Subscriber, which the handle's node
// implements, and a pooled connection it is lent through Lent. Both are
// called per probe or per capture, which are round trips themselves,
// never per statement. Positions cross as uint64.
package prober

import (
	"context"
	"database/sql/driver"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgreplica/pgreplica/internal/pgxtrace"
	"github.com/pgreplica/pgreplica/internal/probe"
	"github.com/pgreplica/pgreplica/internal/sockpeek"
)

// Config is what a prober needs of its maker beyond its Key: how to
// connect, and what only the maker's types can tell or build.
type Config struct {
	// Connector opens the prober's own connections.
	Connector driver.Connector
	// BackendPID is the process id the server reported at start-up on
	// conn (0, or a nil func: the driver does not say). One that is not
	// the backend's own means a pooler answered (Status.Pooled).
	BackendPID func(conn driver.Conn) uint32
	// Denied is a probe's error when the role user may not execute fns,
	// which the router needs: the host answers but cannot be used.
	Denied func(user string, fns probe.Fn) error
	// Interval is how often to probe while no one subscribes.
	Interval time.Duration
}

// Prober probes one address and hands every answer to its subscribers.
type Prober struct {
	key      Key
	cfg      Config
	registry *registry // nil: not shared (New)
	refs     int       // guarded by registry.mu

	// probeFn runs one probe: p.probe, or a stand-in (StandIn).
	probeFn func(context.Context) *Status

	// wakeCh asks for an early probe.
	wakeCh chan struct{}
	// started counts probes sent; a probe's answer carries its count
	// (Status.Seq), so a subscriber can wait for one sent after it asked.
	started atomic.Uint64
	// capturedAt is when a capture last read the primary's position on
	// the probe connection (unix ns; see captureStandsIn).
	capturedAt atomic.Int64

	// mu guards subs and serialises handing answers to them.
	mu   sync.Mutex
	subs []Subscriber

	cancel context.CancelFunc
	done   chan struct{}

	// lock guards conn and what belongs to it (connAt, socks, failed,
	// denied, user, pooled): the loop holds it for a probe, a capture
	// while it borrows the connection (QueryLSN). What follows lock
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
	// pooled is set once a pooler answered on it (Config.BackendPID).
	denied probe.Fn
	user   string
	pooled bool

	// last is the latest answer; failures counts failed probes in a row;
	// lent is the subscribers' statement count at the last look
	// (trafficStandsIn).
	last     *Status
	failures int
	lent     int64
	// lightProbes counts the light probes since the last full one.
	lightProbes int
}

// New returns a prober of key that is not shared: one node's alone (a
// handle whose inner driver is its own, as unit tests make). Start it
// once set up; Release stops it.
func New(key Key, cfg Config) *Prober {
	p := &Prober{key: key, cfg: cfg, wakeCh: make(chan struct{}, 1), lock: newConnLock()}
	p.probeFn = p.probe
	return p
}

// StandIn makes probe run in place of each probe (unit tests); call it
// before Start.
func (p *Prober) StandIn(probe func(context.Context) *Status) { p.probeFn = probe }

// Start starts the probe loop.
func (p *Prober) Start() {
	ctx, cancel := context.WithCancel(pgxtrace.Own(context.Background())) // no AfterConnect, no tracing
	p.cancel, p.done = cancel, make(chan struct{})
	go func() {
		defer close(p.done)
		p.loop(ctx)
	}()
}

// stop ends the loop and waits until it closed the connection.
func (p *Prober) stop() {
	p.cancel()
	<-p.done
}

// Subscribe adds s, whose next answer will be one sent after this call:
// a handle opened now must not start from an older view.
func (p *Prober) Subscribe(s Subscriber) {
	p.mu.Lock()
	p.subs = append(p.subs, s)
	p.mu.Unlock()
	p.Poke()
}

// Unsubscribe removes s; once it returns, s gets no more answers.
func (p *Prober) Unsubscribe(s Subscriber) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, sub := range p.subs {
		if sub == s {
			p.subs = append(p.subs[:i:i], p.subs[i+1:]...)
			return
		}
	}
}

// Poke asks for an early probe without blocking.
func (p *Prober) Poke() {
	select {
	case p.wakeCh <- struct{}{}:
	default:
	}
}

// Started is how many probes were sent so far: an answer whose Seq is
// above it was sent after the call.
func (p *Prober) Started() uint64 { return p.started.Load() }
