package pgreplica

import (
	"time"

	"github.com/pgreplica/pgreplica/internal/histogram"
)

// What the connector tells about itself as values: its counters
// (metrics.go) as Stats, and each host as a NodeStatus (status.go fills
// it in).

// NodeStatus is what the connector knows about one host, as of its last
// probe. It is a copy: reading it takes no lock the router uses.
type NodeStatus struct {
	Addr string // host:port, with the address of its name it stands for: "localhost:5432 (::1)"
	// Address is where its connections go: Addr's host:port, or the
	// address of its name ("[::1]:5432") when the name has several.
	Address string
	Zone    string
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

	entry int // the host's index in Config.Hosts, for Nodes' order
}

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
	// needed a write too recent for any replica.
	RecentWriteReads int64
	// FallbackRejected counts reads refused with ErrFallbackLimit.
	FallbackRejected int64
	// FallbackPeak is the most reads that were on the primary as
	// fallbacks at once: never above half of Config.MaxConnsPerHost.
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
	// answered first; HedgesDenied hedges the budget (5 % of
	// replica reads) refused.
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

// snapshot copies the counters into Stats (all but its Nodes).
func (m *metrics) snapshot() Stats {
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
	}
	// After the wins: a hedge is counted before it can win, so a
	// snapshot never shows more wins than hedges.
	s.Hedges = m.hedges.Load()
	if s.TokenedReads > 0 {
		s.TokenedFallbackRatio = float64(s.TokenedFallbacks) / float64(s.TokenedReads)
	}
	return s
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

// ServerStatus is one server behind a configured host that is an
// endpoint (NodeStatus.Servers): as its connections and probes saw it.
type ServerStatus struct {
	// Addr is host:port as the server sees itself (inet_server_addr(),
	// inet_server_port()), or "local socket".
	Addr string
	Port int
	// StartedAt is pg_postmaster_start_time(): a new value is a restart.
	StartedAt time.Time
	// Replayed is the highest replay position known for it.
	Replayed LSN
	// LastSeen is when a connection or probe last reached it.
	LastSeen time.Time
}
