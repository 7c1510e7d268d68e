package pgreplica

import (
	"context"
	"database/sql"
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

// ConnectorOf returns the *Connector behind a *sql.DB opened with
// sql.Open("pgreplica", …) or sql.OpenDB(connector), for Nodes and Stats.
func ConnectorOf(ctx context.Context, db *sql.DB) (*Connector, error) {
	cn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer cn.Close()
	var c *Connector
	err = cn.Raw(func(dc any) error {
		v, ok := dc.(*conn)
		if !ok {
			return errNotPgreplica
		}
		c = v.c
		return nil
	})
	return c, err
}

var errNotPgreplica = errors.New("pgreplica: the *sql.DB does not use the pgreplica driver")
