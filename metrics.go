package pgreplica

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/pgreplica/pgreplica/internal/histogram"
)

// What the connector tells about itself: its counters (metrics, atomics
// the hot path adds to) and their snapshot (Stats), and each host's
// status as of its last probe (NodeStatus, Nodes), with why it does or
// does not get reads.

// metrics are the connector's counters: atomics only, so recording costs
// no lock on the hot path.
type metrics struct {
	// What most reads count first (the connector keeps them in a cache
	// line with its logger).
	replicaReads, tokenedReads, primaryReads atomic.Int64
	// wait's first bucket counts the position reads that waited for
	// nothing: most of them.
	wait                               histogram.Latency
	fallbackReads                      atomic.Int64
	fallbackTimeout, fallbackNoReplica atomic.Int64
	failedTimeout, failedNoReplica     atomic.Int64
	tokenedFallbacks                   atomic.Int64
	lsnCaptures                        atomic.Int64
	conflictRetries, readOnlyRetries   atomic.Int64
	connLostRetries, fallbackRejected  atomic.Int64
	staleReads, recentWriteReads       atomic.Int64
	hedges, hedgeWins, hedgesDenied    atomic.Int64
	visibilityWaits                    atomic.Int64
	fallbackConflict, conflictsAvoided atomic.Int64
	fallbackPeak                       atomic.Int64
	replayChecks, flightChecks         atomic.Int64
}

// Reasons a read could not be served by a replica.
const (
	ReasonTimeout   = "timeout"    // no replica replayed the position within the wait budget
	ReasonNoReplica = "no_replica" // no healthy replica within the lag bounds
	ReasonConflict  = "conflict"   // replay conflicts cancelled it on the replicas, or its statement kept conflicting lately
)

// Stats is a snapshot of the connector's counters since it was created.
type Stats struct {
	// Reads by where they ran: a replica, the primary because the statement
	// or the requirement said so, or the primary as a fallback.
	ReplicaReads, PrimaryReads, FallbackReads int64
	// Fallbacks counts reads that fell back to the primary, by reason
	// (ReasonTimeout, ReasonNoReplica, ReasonConflict); FailedReads those
	// that returned ErrNoFreshReplica instead (FallbackError).
	Fallbacks, FailedReads map[string]int64
	// RecentWriteReads counts reads sent to the primary because they
	// needed a write too recent for any replica (ReadAfterWritePrimary).
	RecentWriteReads int64
	// FallbackRejected counts reads refused with ErrFallbackLimit;
	// StaleReads those FallbackStale served beyond the lag bounds.
	FallbackRejected, StaleReads int64
	// FallbackPeak is the most reads that were on the primary as
	// fallbacks at once: never above Config.MaxPrimaryFallbacks.
	FallbackPeak int64
	// TokenedReads are reads with a position requirement (session, token,
	// process watermark); TokenedFallbackRatio is the share of them that
	// fell back or failed: the earliest warning of replica degradation.
	TokenedReads, TokenedFallbacks int64
	TokenedFallbackRatio           float64
	// Wait is the time position reads spent finding a fresh replica.
	Wait WaitStats
	// LSNCaptures counts writes (autocommit statements and read-write
	// commits) whose LSN was read after they committed.
	LSNCaptures int64
	// Retries of reads that failed before returning a row: cancelled by a
	// replay conflict, refused as a write (SQLSTATE 25006), or a lost
	// connection.
	ConflictRetries, ReadOnlyRetries, ConnLostRetries int64
	// ConflictsAvoided counts reads sent straight to the primary (as
	// fallbacks, Fallbacks[ReasonConflict]) because their statement kept
	// conflicting with replay on the replicas within the last minute.
	ConflictsAvoided int64
	// Hedges counts reads also sent to a second replica because the first
	// had not answered within the hedge delay; HedgeWins those the second
	// answered first; HedgesDenied hedges the budget (MaxHedgePercent)
	// refused.
	Hedges, HedgeWins, HedgesDenied int64
	// PrimaryVisibilityWaits counts session reads on the primary that
	// waited for it to show a commit a replica may already have shown
	// the session (docs/consistency.md, "Moving to the primary").
	PrimaryVisibilityWaits int64
	// ReplayChecks counts the replay checks reads sent before they ran,
	// a round trip each (lib/pq, simple_protocol, a read-only
	// transaction, a wait for a replica to catch up); FlightChecks those
	// that rode in the read's own flight, at no round trip of their own
	// (docs/consistency.md, "Proven on the server that answers").
	ReplayChecks, FlightChecks int64
	// Nodes is the status of every host.
	Nodes []NodeStatus
}

// WaitStats summarises a latency histogram.
type WaitStats struct {
	Count int64
	Sum   time.Duration
	// Max is the longest observation.
	Max time.Duration
	// P50, P95 and P99 are estimates: interpolated linearly within the
	// bucket that holds the quantile (as Prometheus' histogram_quantile
	// does), and never above Max.
	P50, P95, P99 time.Duration
	// Buckets are cumulative counts of observations ≤ UpperBound.
	Buckets []Bucket
}

// Bucket is one cumulative histogram bucket.
type Bucket struct {
	UpperBound time.Duration
	Count      int64
}

// Stats returns a snapshot of the counters and node status.
func (c *Connector) Stats() Stats {
	m := &c.metrics
	s := Stats{
		ReplicaReads:  m.replicaReads.Load(),
		PrimaryReads:  m.primaryReads.Load(),
		FallbackReads: m.fallbackReads.Load(),
		Fallbacks: map[string]int64{ReasonTimeout: m.fallbackTimeout.Load(), ReasonNoReplica: m.fallbackNoReplica.Load(),
			ReasonConflict: m.fallbackConflict.Load()},
		FailedReads:            map[string]int64{ReasonTimeout: m.failedTimeout.Load(), ReasonNoReplica: m.failedNoReplica.Load()},
		TokenedReads:           m.tokenedReads.Load(),
		FallbackRejected:       m.fallbackRejected.Load(),
		FallbackPeak:           m.fallbackPeak.Load(),
		ConflictsAvoided:       m.conflictsAvoided.Load(),
		StaleReads:             m.staleReads.Load(),
		RecentWriteReads:       m.recentWriteReads.Load(),
		TokenedFallbacks:       m.tokenedFallbacks.Load(),
		Wait:                   waitStats(&m.wait),
		LSNCaptures:            m.lsnCaptures.Load(),
		ConflictRetries:        m.conflictRetries.Load(),
		ReadOnlyRetries:        m.readOnlyRetries.Load(),
		ConnLostRetries:        m.connLostRetries.Load(),
		HedgeWins:              m.hedgeWins.Load(),
		HedgesDenied:           m.hedgesDenied.Load(),
		PrimaryVisibilityWaits: m.visibilityWaits.Load(),
		ReplayChecks:           m.replayChecks.Load(),
		FlightChecks:           m.flightChecks.Load(),
		Nodes:                  c.Nodes(),
	}
	// After the wins: a hedge is counted before it can win, so a
	// snapshot never shows more wins than hedges.
	s.Hedges = m.hedges.Load()
	if s.TokenedReads > 0 {
		s.TokenedFallbackRatio = float64(s.TokenedFallbacks) / float64(s.TokenedReads)
	}
	return s
}

// noteFallback counts a read that could not use a replica.
func (m *metrics) noteFallback(reason string, tokened, failed bool) {
	if tokened {
		m.tokenedFallbacks.Add(1)
	}
	switch {
	case failed && reason == ReasonTimeout:
		m.failedTimeout.Add(1)
	case failed:
		m.failedNoReplica.Add(1)
	case reason == ReasonTimeout:
		m.fallbackTimeout.Add(1)
	case reason == ReasonConflict:
		m.fallbackConflict.Add(1)
	default:
		m.fallbackNoReplica.Add(1)
	}
}

// waitStats copies the wait histogram into its public form.
func waitStats(h *histogram.Latency) WaitStats {
	cum, count, sum, longest := h.Load()
	ws := WaitStats{Count: count, Sum: sum, Max: longest, Buckets: make([]Bucket, len(cum))}
	for i, c := range cum {
		ws.Buckets[i] = Bucket{UpperBound: histogram.Bounds[i], Count: c}
	}
	ws.P50, ws.P95, ws.P99 = ws.Quantile(0.50), ws.Quantile(0.95), ws.Quantile(0.99)
	return ws
}

// Quantile estimates quantile q (0 < q ≤ 1) from the buckets: it finds
// the bucket holding rank q·Count and interpolates linearly between that
// bucket's bounds, as Prometheus' histogram_quantile does, assuming the
// bucket's observations are spread evenly. The estimate never exceeds Max
// (when Max is set); above the largest bound it is that bound.
func (w WaitStats) Quantile(q float64) time.Duration {
	return histogram.Quantile(q, w.Count, w.Max, len(w.Buckets), func(i int) (time.Duration, int64) {
		return w.Buckets[i].UpperBound, w.Buckets[i].Count
	})
}

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
	// none runs). SyncState is its sync_state on the primary (async,
	// sync, potential, quorum). Both read StatusNeedsMonitor when
	// PostgreSQL hides them from the connecting role (it lacks
	// pg_read_all_stats, which pg_monitor includes).
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
	// Endpoint is set once this address's connections reached more than
	// one server (a Kubernetes Service, an HAProxy or cloud reader
	// endpoint, DNS round robin); Pooler once a pooler (PgBouncer)
	// answered for it. Reads there are proven on the connection that runs
	// them. The probe's fields above are of the one server it reached.
	Endpoint, Pooler bool
	// Servers are the servers seen behind an endpoint, each as it sees
	// itself, with what is known of its replay (nil for one server).
	Servers []ServerStatus
	// ServerStartedAt is when the server the probe reached started
	// (pg_postmaster_start_time()): it changes with a restart, also one
	// behind a pooler that kept the probe's connection open.
	ServerStartedAt time.Time
}

// Nodes returns the status of every host in DSN order. Before the first
// connection (or Ping) nothing has been probed. Reads and Why come from the
// selection filters the router uses, applied to a read without a position
// requirement.
func (c *Connector) Nodes() []NodeStatus {
	t := c.topo.Load()
	untokened := plan{topo: t, read: true, maxLag: c.cfg.MaxLag, maxLagBytes: c.cfg.MaxLagBytes}
	out := make([]NodeStatus, len(t.nodes))
	for i := range t.nodes {
		v := &t.nodes[i]
		st := &v.status
		ns := NodeStatus{Addr: v.n.name, Zone: v.n.host.Zone, Role: st.role.String(), RTT: v.rtt}
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
		out[i] = ns
	}
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
