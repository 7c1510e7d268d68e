package pgreplica

import (
	"cmp"
	"context"
	"database/sql/driver"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgreplica/pgreplica/internal/hedging"
	"github.com/pgreplica/pgreplica/internal/prober"
)

// Connector is a pgreplica driver.Connector: give it to sql.OpenDB. It owns
// the per-host pools and the topology monitor; closing the *sql.DB closes
// it, which stops all background work and every physical connection.
type Connector struct {
	// The router comes first: its first fields are what every statement
	// reads (TestHotFieldsLayout).
	router

	// membersMu serialises changes of nodes and the monitor's
	// subscriptions; names is what resolve.go knows of each configured
	// host's name (its goroutine's alone once started).
	membersMu sync.Mutex
	names     []nameWatch
	// probing is set once the nodes have probers (guarded by membersMu).
	probing bool
	// inner makes a node's inner connector (innerConnector; unit tests
	// substitute their own).
	inner innerFunc
	// sharedProbes: the nodes take the process's probers (internal/prober).
	// Unit tests, which make their connectors with inner drivers of their
	// own, get probers private to each node, where probe, when set,
	// stands in for the probe.
	sharedProbes bool
	probe        func(context.Context, *node) *prober.Status

	// connLost is when a connection of any node was last found lost
	// (hostPool.answeredLately).
	connLost atomic.Int64

	startOnce sync.Once
	// startErr is why the start failed: a resolved address that the
	// inner driver refused (expandNames).
	startErr  error
	cancel    context.CancelFunc
	closeOnce sync.Once
}

var (
	_ driver.Connector = (*Connector)(nil)
	_ io.Closer        = (*Connector)(nil)
)

// NewConnector validates cfg and returns a connector for sql.OpenDB. It does
// not connect: the first connection (or db.Ping) discovers roles.
func NewConnector(cfg Config) (*Connector, error) {
	c, err := newConnector(cfg, innerConnector)
	if c != nil {
		c.sharedProbes = true
	}
	return c, err
}

// newConnector lets unit tests substitute the inner driver.
func newConnector(cfg Config, inner innerFunc) (*Connector, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &Connector{router: router{cfg: cfg, settings: settingsOf(&cfg), pq: cfg.Driver == DriverPq, log: cfg.Logger}, inner: inner}
	c.flights = flightsFor(&c.cfg)
	c.refused.Init(1024)
	c.conflicting.Init(1024)
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	c.marks = handleMarks{mark: &c.mark, local: &c.localMarks, capturer: c.capturing(), captureTimeout: cfg.ConnectTimeout}
	c.mon = newMonitor(&c.nodes, &c.membersMu, &c.topo, &c.primaryLSNs, &c.marks, monitorSettings{
		password: cfg.Password,
		interval: cfg.knobs.MonitorInterval, idleInterval: cfg.knobs.IdleMonitorInterval,
	}, c.log)
	c.fallbacks.slots = make(chan struct{}, cfg.fallbackSlots())
	c.fallbacks.wait, c.fallbacks.metrics, c.fallbacks.log = cfg.ConnectTimeout, &c.metrics, c.log
	c.hedges = hedger{budget: hedging.NewBudget(cfg.knobs.MaxHedgePercent), watch: newHedgeWatch(cfg.knobs.HedgeDelay)}
	c.picker = cmp.Or(cfg.Picker, newPicker(cfg.Policy))
	var nodes []*node
	for i, h := range cfg.Hosts {
		n, err := c.newNode(i, i, h, "")
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, n)
	}
	c.nodes.Store(&nodes)
	c.names = make([]nameWatch, len(cfg.Hosts))
	t := emptyTopology(nodes)
	t.marks = &c.localMarks // no cluster known yet (marksFor)
	c.topo.Store(t)
	return c, nil
}

// newNode makes node idx for configured host entry h, dialled at pin
// (one of its name's addresses, resolve.go), or as configured when pin
// is "".
func (c *Connector) newNode(idx, entry int, h Host, pin string) (*node, error) {
	ic, err := c.inner(&c.cfg, h, pin)
	if err != nil {
		return nil, err
	}
	if h.Zone == c.settings.zone {
		// The same string, so that selection's comparison of a replica's
		// zone with the client's stops at the pointers.
		h.Zone = c.settings.zone
	}
	n := &node{idx: idx, entry: entry, pin: pin, host: h, name: pinnedName(h, pin), inner: ic}
	if n.pool, err = newHostPool(n, ic, &c.cfg, &c.connLost); err != nil {
		return nil, err
	}
	return n, nil
}

// Driver returns the pgreplica driver, bound to c (see ConnectorOf).
func (c *Connector) Driver() driver.Driver { return Driver{c: c} }

// Connect returns a virtual connection. The first call starts the monitor
// and waits for its first round, so a cluster nobody can reach is reported
// here (errors.Is(err, ErrNoReachableHost)).
func (c *Connector) Connect(ctx context.Context) (driver.Conn, error) {
	if err := c.start(ctx); err != nil {
		return nil, err
	}
	return &conn{c: c}, nil
}

// start starts the monitor once and waits for its first round (see
// Connect): the first step of both front doors.
func (c *Connector) start(ctx context.Context) error {
	if c.closed.Load() {
		return ErrClosed
	}
	err := c.awaitTopology(ctx)
	if perr := c.privilegeErr(c.topo.Load()); perr != nil && ctx.Err() == nil {
		// Hosts that answered but may not be used, or an option the
		// role cannot serve: say so rather than "unreachable".
		return perr
	}
	return err
}

// awaitTopology starts the monitor once and waits until some host answered
// (or the first rounds found none, or ctx ends).
func (c *Connector) awaitTopology(ctx context.Context) error {
	c.startOnce.Do(func() {
		if c.startErr = c.followNames(ctx, time.Now()); c.startErr != nil {
			return
		}
		c.acquireProbers()
		mctx, cancel := context.WithCancel(context.Background())
		c.cancel = cancel
		c.wg.Add(2)
		go func() {
			defer c.wg.Done()
			c.mon.run(mctx)
		}()
		go func() {
			defer c.wg.Done()
			c.watchNames(mctx)
		}()
		if c.cfg.knobs.HedgeDelay > 0 {
			c.wg.Add(1)
			go func() {
				defer c.wg.Done()
				c.hedges.watch.run(mctx, &c.router)
			}()
		}
	})
	if c.startErr != nil {
		return c.startErr
	}
	select {
	case <-c.mon.ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	if t := c.topo.Load(); t.reachable {
		return nil
	}
	// Nobody answered last time: ask again now rather than fail on a
	// stale view.
	if err := c.mon.refresh(ctx); err != nil {
		return err
	}
	if c.closed.Load() {
		return ErrClosed
	}
	if t := c.topo.Load(); !t.reachable {
		return t.reachErr
	}
	return nil
}

// acquireProbers gives every node its prober.
func (c *Connector) acquireProbers() {
	c.membersMu.Lock()
	defer c.membersMu.Unlock()
	for _, n := range c.nodeList() {
		c.acquireProber(n)
	}
	c.probing = true
}

// acquireProber gives n its prober: the process's for its address
// (internal/prober), or one of its own (see sharedProbes).
func (c *Connector) acquireProber(n *node) {
	if !c.sharedProbes {
		n.prober = prober.New(c.proberKey(n), n.proberConfig())
		if c.probe != nil {
			n.prober.StandIn(func(ctx context.Context) *prober.Status { return c.probe(ctx, n) })
		}
		n.prober.Start()
		return
	}
	n.prober = prober.Acquire(c.proberKey(n), n.proberConfig())
}

func (c *Connector) proberKey(n *node) prober.Key {
	return prober.Key{Driver: c.cfg.Driver, DSN: c.cfg.hostDSN(n.host), Pin: n.pin, ConnectTimeout: c.cfg.ConnectTimeout,
		Timeout: c.cfg.knobs.ProbeTimeout, Pgx: c.cfg.Pgx.monitorKey()}
}

// releaseProbers lets go of the probers (after the monitor stopped).
func (c *Connector) releaseProbers() {
	for _, n := range c.nodeList() {
		if !n.retired.Load() { // a retired node let go of its own
			c.releaseProber(n)
		}
	}
}

// releaseProber lets go of n's prober: the last handle on one stops it
// and closes its connection.
func (c *Connector) releaseProber(n *node) {
	if n.prober != nil {
		n.prober.Release()
	}
}

// privilegeErr is what Connect and Ping return when the role lacks a
// privilege the driver needs (topology.privilegeErr), nil otherwise.
func (c *Connector) privilegeErr(t *topology) error { return t.privilegeErr() }

// Close stops the monitor and closes every physical connection at once,
// like db.Close with pgx or lib/pq: it does not wait for connections the
// application still holds through rows it never closed or a transaction it
// left open. Those are closed too (see hostPool.close); using them
// afterwards fails.
func (c *Connector) Close() error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		c.flushCaptures()
		c.startOnce.Do(func() {}) // never start after Close
		if c.cancel != nil {
			c.cancel()
		}
		c.wg.Wait()
		c.releaseProbers()
		c.capture.closeConn()
		taken := 0
		for _, n := range c.nodeList() {
			taken += n.pool.close()
		}
		if taken > 0 {
			c.log.Warn("pgreplica: closed connections still borrowed (rows or transactions not closed?)", "connections", taken)
		}
	})
	return nil
}
