package pgreplicaprom

import (
	"github.com/pgreplica/pgreplica"
	"github.com/prometheus/client_golang/prometheus"
)

// Collector is a prometheus.Collector over one connector's Stats. Every
// Collect reads one snapshot, so the figures of a scrape are consistent
// with each other. It holds no state of its own and is safe for
// concurrent scrapes.
type Collector struct {
	stats func() pgreplica.Stats // the connector's Stats

	reads, fallbacks, failed            *prometheus.Desc
	tokened, tokenedFallbacks, captures *prometheus.Desc
	retries, hedges, wait               *prometheus.Desc
	rejected, fallbackPeak              *prometheus.Desc
	conflictsAvoided, visibilityWaits   *prometheus.Desc
	replayChecks                        *prometheus.Desc

	nodeUp, nodeRole, lagBytes, lagSeconds *prometheus.Desc
	paused, eligible, rtt                  *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a collector for c; register it with a
// prometheus.Registerer of your choice. It panics if c is nil, as a
// scrape would later.
func NewCollector(c *pgreplica.Connector, opts ...Option) *Collector {
	if c == nil {
		panic("pgreplicaprom: NewCollector with a nil *pgreplica.Connector")
	}
	return newCollector(c.Stats, opts...)
}

// newCollector returns a collector over what stats returns.
func newCollector(stats func() pgreplica.Stats, opts ...Option) *Collector {
	o := options{namespace: DefaultNamespace}
	for _, opt := range opts {
		opt(&o)
	}
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(o.namespace, "", name), help, labels, o.constLabels)
	}
	node := []string{"node", "zone"}
	return &Collector{
		stats: stats,

		reads: desc("reads_total",
			"Reads by where they ran: replica, primary (required by the statement or context), fallback (primary because no replica qualified), or recent_write (primary because the read needed a write too young for any replica).", "route"),
		fallbacks: desc("read_fallbacks_total",
			"Reads that fell back to the primary, by reason (timeout: no replica replayed the position within the wait budget; no_replica: no healthy replica within the lag bounds; conflict: replay conflicts cancelled it on the replicas, or its statement kept conflicting lately).", "reason"),
		failed: desc("reads_failed_total",
			"Reads that returned ErrNoFreshReplica instead of falling back (FallbackError), by reason.", "reason"),
		tokened: desc("tokened_reads_total",
			"Reads with a position requirement (session, token or process watermark)."),
		tokenedFallbacks: desc("tokened_read_fallbacks_total",
			"Reads with a position requirement that fell back to the primary or failed; divided by tokened_reads_total it is the earliest sign of replica degradation."),
		captures: desc("lsn_captures_total",
			"Writes whose commit LSN was read after they committed."),
		retries: desc("read_retries_total",
			"Replica reads retried before returning a row, by kind (conflict: cancelled by replay; read_only: refused as a write, rerun on the primary; conn_lost: connection lost).", "kind"),
		hedges: desc("read_hedges_total",
			"Replica reads also sent to a second replica because the first had not answered within the hedge delay, by outcome (won: the second answered first; lost: the first did), and hedges the budget refused (denied).", "outcome"),
		wait: desc("replica_wait_seconds",
			"Time reads with a position requirement spent finding a replica fresh enough."),
		rejected: desc("read_fallbacks_rejected_total",
			"Reads refused with ErrFallbackLimit: they queued for one of the fallback slots on the primary (half of MaxConnsPerHost) until their context's deadline, or ConnectTimeout when it had none."),
		fallbackPeak: desc("read_fallbacks_peak",
			"The most reads that were on the primary as fallbacks at once since the connector started; never above half of MaxConnsPerHost."),
		conflictsAvoided: desc("read_conflicts_avoided_total",
			"Reads sent straight to the primary because their statement kept conflicting with replay on the replicas in the last minute; they count in read_fallbacks_total{reason=\"conflict\"} too."),
		visibilityWaits: desc("primary_visibility_waits_total",
			"Session reads on the primary that waited for it to show a commit a replica had already shown the session."),
		replayChecks: desc("replay_checks_total",
			"Replay checks that proved reads fresh, by where they ran (before: a round trip before the read; in_flight: in the read's own flight, at no round trip of its own).", "where"),

		nodeUp: desc("node_up",
			"1 if the node answered its last probe, 0 if the probe failed or none ran yet.", node...),
		nodeRole: desc("node_role",
			"The node's role as of its last probe (primary, replica or unknown), always 1.", append(node, "role")...),
		lagBytes: desc("node_lag_bytes",
			"Replica only: the primary's WAL position minus the replica's replay position.", node...),
		lagSeconds: desc("node_lag_seconds",
			"Replica only: how long ago the primary passed the replica's replay position (0 when caught up).", node...),
		paused: desc("node_replay_paused",
			"Replica only: 1 if WAL replay is paused (pg_is_wal_replay_paused).", node...),
		eligible: desc("node_reads_eligible",
			"1 if the router sends reads to the node now.", node...),
		rtt: desc("node_rtt_seconds",
			"Smoothed round trip of the node's probe; absent until the node answered once.", node...),
	}
}

// Describe sends the descriptors of every metric the collector emits.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.reads, c.fallbacks, c.failed, c.tokened, c.tokenedFallbacks, c.captures, c.retries, c.hedges, c.wait,
		c.rejected, c.fallbackPeak, c.conflictsAvoided, c.visibilityWaits, c.replayChecks,
		c.nodeUp, c.nodeRole, c.lagBytes, c.lagSeconds, c.paused, c.eligible, c.rtt,
	} {
		ch <- d
	}
}

// Collect reads one Stats snapshot and sends it as constant metrics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	count := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	count(c.reads, s.ReplicaReads, "replica")
	count(c.reads, s.PrimaryReads, "primary")
	count(c.reads, s.FallbackReads, "fallback")
	count(c.reads, s.RecentWriteReads, "recent_write")
	for reason, n := range s.Fallbacks {
		count(c.fallbacks, n, reason)
	}
	for reason, n := range s.FailedReads {
		count(c.failed, n, reason)
	}
	count(c.tokened, s.TokenedReads)
	count(c.tokenedFallbacks, s.TokenedFallbacks)
	count(c.captures, s.LSNCaptures)
	count(c.retries, s.ConflictRetries, "conflict")
	count(c.retries, s.ReadOnlyRetries, "read_only")
	count(c.retries, s.ConnLostRetries, "conn_lost")
	count(c.hedges, s.HedgeWins, "won")
	count(c.hedges, s.Hedges-s.HedgeWins, "lost")
	count(c.hedges, s.HedgesDenied, "denied")
	count(c.rejected, s.FallbackRejected)
	ch <- prometheus.MustNewConstMetric(c.fallbackPeak, prometheus.GaugeValue, float64(s.FallbackPeak))
	count(c.conflictsAvoided, s.ConflictsAvoided)
	count(c.visibilityWaits, s.PrimaryVisibilityWaits)
	count(c.replayChecks, s.ReplayChecks, "before")
	count(c.replayChecks, s.FlightChecks, "in_flight")

	buckets := make(map[float64]uint64, len(s.Wait.Buckets))
	for _, b := range s.Wait.Buckets {
		buckets[b.UpperBound.Seconds()] = uint64(b.Count)
	}
	ch <- prometheus.MustNewConstHistogram(c.wait, uint64(s.Wait.Count), s.Wait.Sum.Seconds(), buckets)

	for _, n := range s.Nodes {
		c.collectNode(ch, n)
	}
}

// roleReplica is NodeStatus.Role of a replica.
const roleReplica = "replica"

func (c *Collector) collectNode(ch chan<- prometheus.Metric, n pgreplica.NodeStatus) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{n.Addr, n.Zone}, labels...)...)
	}
	gauge(c.nodeUp, bit(n.Err == nil && n.Role != "unknown"))
	gauge(c.nodeRole, 1, n.Role)
	gauge(c.eligible, bit(n.Reads))
	if n.RTT > 0 {
		gauge(c.rtt, n.RTT.Seconds())
	}
	// Lag and replay only mean something on a replica; a primary showing
	// 0 would read as "caught up" in dashboards that average over nodes.
	if n.Role == roleReplica {
		gauge(c.lagBytes, float64(n.LagBytes))
		gauge(c.lagSeconds, n.LagTime.Seconds())
		gauge(c.paused, bit(n.ReplayPaused))
	}
}

func bit(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
