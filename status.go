package pgreplica

import (
	"cmp"
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
	untokened := plan{topo: t, read: true, maxLag: c.cfg.MaxLag}
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
		default:
			ns.Why = r.explain(v, &untokened, t)
		}
		if err := c.lookupFailed(v.n.entry); err != nil {
			// Discovery (a name's lookup, PatroniLookup) failing leaves
			// the membership as last listed.
			ns.Why += "; members as last listed, the lookup failing: " + err.Error()
		}
		out = append(out, ns)
	}
	// A name's addresses take free slots as they come (resolve.go):
	// sorted back into DSN order.
	slices.SortStableFunc(out, func(a, b NodeStatus) int { return cmp.Compare(a.entry, b.entry) })
	return out
}
