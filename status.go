package pgreplica

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"
)

// What a handle knows of each host, as Nodes() and `pgreplica status`
// show it (NodeStatus, stats.go), with the words of the filters that keep
// a host from reads.

// Stats returns a snapshot of the counters and node status.
func (c *Connector) Stats() Stats {
	s := c.metrics.snapshot()
	s.Nodes = c.Nodes()
	return s
}

// Nodes returns the status of every host in DSN order. Before the first
// connection (or Ping) nothing has been probed. Reads and Why come from the
// selection filters the router uses, applied to a read without a position
// requirement.
func (c *Connector) Nodes() []NodeStatus {
	t := c.topo.Load()
	untokened := plan{topo: t, read: true, maxLag: c.cfg.MaxLag, maxLagBytes: c.cfg.MaxLagBytes}
	out := make([]NodeStatus, 0, len(t.nodes))
	for i := range t.nodes {
		v := &t.nodes[i]
		if v.n.retired.Load() {
			continue
		}
		st := &v.status
		ns := NodeStatus{Addr: v.n.name, Address: v.n.address(), Zone: v.n.host.Zone, Role: st.role.String(), RTT: v.rtt, entry: v.n.entry}
		if v.probed {
			ns.Err, ns.Timeline, ns.SystemID, ns.LSN = st.err, st.timeline, st.sysid, st.lsn
			ns.ReceiveLSN, ns.ReplayPaused, ns.Receiver, ns.Sampled = st.receive, st.paused, st.receiver, st.at
			ns.SyncState = v.syncState
			if st.receiverHidden {
				ns.Receiver = StatusNeedsMonitor
			}
		}
		if st.role == roleReplica {
			ns.LSN = max(ns.LSN, LSN(v.n.replay.Load()))
			ns.LagBytes, ns.LagTime = v.lagBytes, v.lag
		}
		ns.Endpoint, ns.Pooler = v.n.endpoint.Load(), v.n.pooled.Load()
		if st.server != nil {
			ns.ServerStartedAt = time.UnixMicro(st.server.id.started)
		}
		if ns.Endpoint {
			ns.Servers = v.n.servers.snapshot()
		}
		r := untokened.reject(v, false)
		ns.Reads = r == rejectNone
		switch {
		case i == t.primary:
			ns.Why = "primary: writes, and reads that require it or fall back"
		case t.writeErr != nil && st.role == rolePrimary && st.err == nil:
			ns.Why = t.writeErr.Error()
		case ns.Reads && st.paused:
			ns.Why = "replay paused: serves only reads it is already fresh enough for"
		case ns.Reads && c.cfg.ExcludeSyncStandby && v.syncState == StatusNeedsMonitor:
			ns.Why = "may be a synchronous standby: ExcludeSyncStandby cannot tell without pg_monitor, and new connections fail"
		default:
			ns.Why = r.explain(v, &untokened, t)
		}
		out = append(out, ns)
	}
	// A name's addresses take free slots as they come (resolve.go):
	// sorted back into DSN order.
	slices.SortStableFunc(out, func(a, b NodeStatus) int { return cmp.Compare(a.entry, b.entry) })
	return out
}

// explain says in words why a filter rejected v ("" for rejectNone).
func (r rejection) explain(v *nodeView, pl *plan, t *topology) string {
	st := &v.status
	var pst nodeStatus
	if p := t.primaryNode(); p != nil {
		pst = p.status
	}
	switch r {
	case rejectUnprobed:
		return "not probed yet"
	case rejectUnreachable:
		if errors.Is(st.err, ErrInsufficientPrivilege) {
			return "answers, but the role lacks privileges: " + st.err.Error()
		}
		return "unreachable: " + st.err.Error()
	case rejectRetired:
		return "no longer an address of " + v.n.host.Addr
	case rejectAlias:
		return "the same server as " + v.aliasOf.name + ", which takes its statements"
	case rejectSuperseded:
		return fmt.Sprintf("out of recovery on timeline %d beside the primary on timeline %d: superseded, gets no writes", st.timeline, pst.timeline)
	case rejectNotReplica:
		return "not a replica"
	case rejectOtherCluster:
		return fmt.Sprintf("system identifier %d differs from the primary's %d", st.sysid, pst.sysid)
	case rejectOldTimeline:
		if st.receiverHidden {
			return fmt.Sprintf("on timeline %d as of its last restartpoint, behind the primary's timeline %d: "+
				"its WAL receiver's timeline needs pg_monitor, so it gets reads once a restartpoint shows it follows", st.timeline, pst.timeline)
		}
		return fmt.Sprintf("on timeline %d, behind the primary's timeline %d: not following it yet", st.timeline, pst.timeline)
	case rejectNewTimeline:
		return fmt.Sprintf("on timeline %d, ahead of the primary's timeline %d: it follows another primary, not this one", st.timeline, pst.timeline)
	case rejectSyncStandby:
		return "synchronous standby (excluded by configuration)"
	case rejectSuspect:
		return "suspect: a query failed on it; waiting for the next probe"
	case rejectTried:
		return "failed this read"
	case rejectLagBytes:
		return fmt.Sprintf("lag %d bytes > pgreplica_max_lag_bytes %d", v.lagBytes, pl.maxLagBytes)
	case rejectLagTime:
		return fmt.Sprintf("lag %v > pgreplica_max_lag %v", v.lag.Round(time.Millisecond), pl.maxLag)
	case rejectStale:
		return fmt.Sprintf("lag %v > the read's staleness bound %v", v.lag.Round(time.Millisecond), pl.maxLag)
	case rejectBehind:
		return fmt.Sprintf("has not replayed %s yet", pl.need)
	case rejectPooledTx:
		return "behind a pooler: a transaction that needs a position cannot be proven there"
	case rejectUnchecked:
		return "an endpoint or a pooler: a read that cannot check its connection may reach a server not known to have the position"
	}
	return ""
}
