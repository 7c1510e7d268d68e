package pgreplica

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"
)

// NodeStatus is what the connector knows about one host, as of its last
// probe. It is a copy: reading it takes no lock the router uses.
type NodeStatus struct {
	Addr string // host:port
	Zone string
	// Role is RolePrimary, RoleReplica or RoleUnknown; a host that stopped
	// answering keeps its last known role, with Err set.
	Role string
	// Err is the last probe error; nil when the host answered.
	Err      error
	Timeline uint32
	SystemID uint64
	// LSN is the primary's current WAL position, or the replica's
	// replayed position as the router knows it (cached, monotonic).
	LSN LSN
	// ReceiveLSN is what a replica has received (replayed or not).
	ReceiveLSN LSN
	// ReplayPaused reports pg_is_wal_replay_paused().
	ReplayPaused bool
	// Receiver is a replica's WAL receiver state ("streaming", …; "" when
	// none runs). SyncState is its sync_state on the primary, when the
	// primary reports it (needs pg_read_all_stats to map it).
	Receiver  string
	SyncState string
	// LagBytes is the primary's position minus the replica's replay
	// position; LagTime how long ago the primary passed the replica's
	// replay position (0 when caught up; grows while it stays behind).
	LagBytes uint64
	LagTime  time.Duration
	// RTT is the smoothed probe round trip.
	RTT time.Duration
	// Reads says whether the router sends reads here, and Why not.
	Reads bool
	Why   string
	// Sampled is when the probe answered.
	Sampled time.Time
}

// Nodes returns the status of every host in DSN order. Before the first
// connection (or Ping) nothing has been probed.
func (c *Connector) Nodes() []NodeStatus {
	t := c.topo.Load()
	now := time.Now()
	out := make([]NodeStatus, len(c.nodes))
	for i, n := range c.nodes {
		ns := NodeStatus{Addr: n.name, Zone: n.host.Zone, Role: roleUnknown.String()}
		st := n.status.Load()
		if st != nil {
			ns.Role, ns.Err, ns.Timeline, ns.SystemID = st.role.String(), st.err, st.timeline, st.sysid
			ns.ReceiveLSN, ns.ReplayPaused, ns.Receiver, ns.Sampled = st.receive, st.paused, st.receiver, st.at
			ns.LSN = st.lsn
			if t.primary != nil && st.appName != "" {
				ns.SyncState = t.primary.status.Load().syncStates[st.appName]
			}
		}
		ns.RTT = n.rttEWMA()
		if st != nil && st.role == roleReplica {
			ns.LSN = max(ns.LSN, LSN(n.replay.Load()))
			ns.LagBytes = n.lagBytes.Load()
			ns.LagTime = n.lagTime()
		}
		why := t.excluded(n, c.cfg.ExcludeSyncStandby)
		if why == "" {
			why = c.readBlocker(n, now)
		}
		ns.Reads = why == ""
		switch {
		case n == t.primary:
			why = "primary: writes, and reads that require it or fall back"
		case t.writeErr != nil && st != nil && st.role == rolePrimary:
			why = t.writeErr.Error()
		case ns.Reads && ns.ReplayPaused:
			why = "replay paused: serves only reads it is already fresh enough for"
		}
		ns.Why = why
		out[i] = ns
	}
	return out
}

// readBlocker says why a healthy replica gets no untokened reads now.
func (c *Connector) readBlocker(n *node, now time.Time) string {
	switch {
	case n.suspect.Load():
		return "suspect: a query failed on it; waiting for the next probe"
	case c.cfg.MaxLagBytes > 0 && n.lagBytes.Load() > c.cfg.MaxLagBytes:
		return fmt.Sprintf("lag %d bytes > pgreplica_max_lag_bytes %d", n.lagBytes.Load(), c.cfg.MaxLagBytes)
	case c.cfg.MaxLag > 0 && n.lagTime() > c.cfg.MaxLag:
		return fmt.Sprintf("lag %v > pgreplica_max_lag %v", n.lagTime().Round(time.Millisecond), c.cfg.MaxLag)
	}
	return ""
}

// ConnectorOf returns the *Connector behind a *sql.DB, for Nodes and Stats.
// It opens no connection where it can avoid it, so it works with every host
// down (when an operator most wants Nodes) and with the pool exhausted:
//
//   - sql.Open("pgreplica", dsn) and sql.OpenDB(connector): database/sql's
//     (*sql.DB).Driver() returns the connector's Driver, which knows it.
//   - A wrapping driver (instrumentation, middleware) whose driver.Driver
//     has an Unwrap() driver.Driver method returning the driver it wraps,
//     at any depth.
//   - Otherwise ConnectorOf borrows a connection (waiting as ctx allows) and
//     looks through conns that expose the conn they wrap: Raw()
//     driver.Conn (XSAM/otelsql), Raw() any or Unwrap() driver.Conn. This
//     needs a reachable cluster and a free conn. Wrappers that expose
//     neither (ngrok/sqlmw keeps its parent unexported) cannot be seen
//     through.
//
// The way that always works is to keep the connector you made:
// c, err := NewConnector(cfg) (or ParseDSN then NewConnector), then
// sql.OpenDB(c) or sql.OpenDB(wrapper(c)), and use c.
func ConnectorOf(ctx context.Context, db *sql.DB) (*Connector, error) {
	if c := connectorOfDriver(db.Driver()); c != nil {
		return c, nil
	}
	cn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgreplica: ConnectorOf: driver %T does not reveal its connector, and no connection to look through: %w", db.Driver(), err)
	}
	defer cn.Close()
	var c *Connector
	err = cn.Raw(func(dc any) error {
		for range maxUnwrap {
			if v, ok := dc.(*conn); ok {
				c = v.c
				return nil
			}
			if dc = unwrapConn(dc); dc == nil {
				break
			}
		}
		return errNotPgreplica
	})
	return c, err
}

// maxUnwrap bounds how many wrappers ConnectorOf looks through (a wrapper
// that returns itself must not loop forever).
const maxUnwrap = 16

// connectorOfDriver finds the connector of a Driver that a *Connector
// returned, through wrappers with Unwrap() driver.Driver; nil if none.
func connectorOfDriver(d driver.Driver) *Connector {
	for range maxUnwrap {
		switch v := d.(type) {
		case Driver:
			return v.c
		case *Driver:
			if v == nil {
				return nil
			}
			return v.c
		case interface{ Unwrap() driver.Driver }:
			d = v.Unwrap()
		default:
			return nil
		}
	}
	return nil
}

// unwrapConn returns the conn a wrapping conn exposes, or nil.
func unwrapConn(c any) any {
	switch v := c.(type) {
	case interface{ Raw() driver.Conn }:
		return v.Raw()
	case interface{ Raw() any }:
		return v.Raw()
	case interface{ Unwrap() driver.Conn }:
		return v.Unwrap()
	}
	return nil
}

var errNotPgreplica = errors.New("pgreplica: the *sql.DB does not use the pgreplica driver")
