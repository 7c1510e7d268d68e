package pgreplicaotel

import (
	"context"
	"errors"
	"fmt"

	"github.com/pgreplica/pgreplica"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// ScopeName is the instrumentation scope of the meter Register uses.
const ScopeName = "github.com/pgreplica/pgreplica/pgreplicaotel"

var errNil = errors.New("pgreplicaotel: Register needs a *pgreplica.Connector and a MeterProvider")

// instruments are the observable instruments one callback reports.
type instruments struct {
	reads, fallbacks, failures, retries  metric.Int64ObservableCounter
	hedges, rejected                     metric.Int64ObservableCounter
	conflictsAvoided, visibilityWaits    metric.Int64ObservableCounter
	replayChecks                         metric.Int64ObservableCounter
	tokened, tokenedFallbacks, captures  metric.Int64ObservableCounter
	waitTime                             metric.Float64ObservableCounter
	fallbackPeak                         metric.Int64ObservableGauge
	up, role, eligible, lagBytes, paused metric.Int64ObservableGauge
	rtt, lagTime                         metric.Float64ObservableGauge
}

// Register creates pgreplica's instruments on a meter of mp and registers
// one callback that reads a single c.Stats() snapshot per collection, so
// the figures of one collection are consistent with each other. Call
// Unregister on the result to stop reporting (before or after closing the
// *sql.DB: Stats never touches the network).
func Register(c *pgreplica.Connector, mp metric.MeterProvider, opts ...Option) (metric.Registration, error) {
	if c == nil || mp == nil {
		return nil, errNil
	}
	return register(c.Stats, mp, opts...)
}

// register is Register over what stats returns.
func register(stats func() pgreplica.Stats, mp metric.MeterProvider, opts ...Option) (metric.Registration, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	m := mp.Meter(ScopeName)
	in, err := newInstruments(m)
	if err != nil {
		return nil, fmt.Errorf("pgreplicaotel: %w", err)
	}
	r := &reporter{stats: stats, in: in, extra: o.attrs}
	reg, err := m.RegisterCallback(r.observe,
		in.reads, in.fallbacks, in.failures, in.retries, in.hedges, in.tokened, in.tokenedFallbacks, in.captures,
		in.rejected, in.conflictsAvoided, in.visibilityWaits, in.replayChecks, in.fallbackPeak,
		in.waitTime, in.up, in.role, in.eligible, in.lagBytes, in.paused, in.rtt, in.lagTime)
	if err != nil {
		return nil, fmt.Errorf("pgreplicaotel: register callback: %w", err)
	}
	return reg, nil
}

func newInstruments(m metric.Meter) (*instruments, error) {
	var errs []error
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		i, err := m.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return i
	}
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		i, err := m.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return i
	}
	fcounter := func(name, unit, desc string) metric.Float64ObservableCounter {
		i, err := m.Float64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return i
	}
	fgauge := func(name, unit, desc string) metric.Float64ObservableGauge {
		i, err := m.Float64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return i
	}
	in := &instruments{
		reads: counter("pgreplica.reads", "{read}",
			"Reads by where they ran: replica, primary (required by the statement or context), fallback (primary because no replica qualified), or recent_write (primary because the read needed a write too young for any replica)."),
		fallbacks: counter("pgreplica.read.fallbacks", "{read}",
			"Reads that fell back to the primary, by reason (timeout, no_replica, conflict)."),
		failures: counter("pgreplica.read.failures", "{read}",
			"Reads that returned ErrNoFreshReplica instead of falling back (FallbackError), by reason."),
		retries: counter("pgreplica.read.retries", "{retry}",
			"Replica reads retried before returning a row, by kind (conflict, read_only, conn_lost)."),
		hedges: counter("pgreplica.read.hedges", "{read}",
			"Replica reads also sent to a second replica, by outcome (won, lost), and hedges the budget refused (denied)."),
		rejected: counter("pgreplica.read.fallbacks.rejected", "{read}",
			"Reads refused with ErrFallbackLimit: they queued for one of the fallback slots on the primary (half of MaxConnsPerHost) until their context's deadline, or ConnectTimeout when it had none."),
		fallbackPeak: gauge("pgreplica.read.fallbacks.peak", "{read}",
			"The most reads that were on the primary as fallbacks at once since the connector started; never above half of MaxConnsPerHost."),
		conflictsAvoided: counter("pgreplica.read.conflicts_avoided", "{read}",
			"Reads sent straight to the primary because their statement kept conflicting with replay on the replicas in the last minute; they count in pgreplica.read.fallbacks{reason=conflict} too."),
		visibilityWaits: counter("pgreplica.primary.visibility_waits", "{read}",
			"Session reads on the primary that waited for it to show a commit a replica had already shown the session."),
		replayChecks: counter("pgreplica.replay_checks", "{check}",
			"Replay checks that proved reads fresh, by where they ran (before: a round trip before the read; in_flight: in the read's own flight)."),
		tokened: counter("pgreplica.tokened_reads", "{read}",
			"Reads with a position requirement (session, token or process watermark)."),
		tokenedFallbacks: counter("pgreplica.tokened_read.fallbacks", "{read}",
			"Reads with a position requirement that fell back to the primary or failed."),
		captures: counter("pgreplica.lsn.captures", "{write}",
			"Writes whose commit LSN was read after they committed."),
		waitTime: fcounter("pgreplica.replica.wait.time", "s",
			"Total time reads with a position requirement spent finding a replica fresh enough; divided by pgreplica.tokened_reads it is the mean wait."),
		up: gauge("pgreplica.node.up", "",
			"1 if the node answered its last probe, 0 if the probe failed or none ran yet."),
		role: gauge("pgreplica.node.role", "",
			"The node's role as of its last probe (primary, replica or unknown), always 1."),
		eligible: gauge("pgreplica.node.reads_eligible", "",
			"1 if the router sends reads to the node now."),
		lagBytes: gauge("pgreplica.node.lag", "By",
			"Replica only: the primary's WAL position minus the replica's replay position."),
		paused: gauge("pgreplica.node.replay_paused", "",
			"Replica only: 1 if WAL replay is paused."),
		rtt: fgauge("pgreplica.node.rtt", "s",
			"Smoothed round trip of the node's probe; absent until the node answered once."),
		lagTime: fgauge("pgreplica.node.lag_time", "s",
			"Replica only: how long ago the primary passed the replica's replay position (0 when caught up)."),
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return in, nil
}

// reporter observes one connector's Stats.
type reporter struct {
	stats func() pgreplica.Stats // the connector's Stats
	in    *instruments
	extra []attribute.KeyValue
}

// set returns the attribute set of extra plus kv.
func (r *reporter) set(kv ...attribute.KeyValue) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(append(kv, r.extra...)...))
}

func (r *reporter) observe(_ context.Context, o metric.Observer) error {
	s := r.stats()
	in := r.in
	o.ObserveInt64(in.reads, s.ReplicaReads, r.set(attribute.String("route", "replica")))
	o.ObserveInt64(in.reads, s.PrimaryReads, r.set(attribute.String("route", "primary")))
	o.ObserveInt64(in.reads, s.FallbackReads, r.set(attribute.String("route", "fallback")))
	o.ObserveInt64(in.reads, s.RecentWriteReads, r.set(attribute.String("route", "recent_write")))
	for reason, n := range s.Fallbacks {
		o.ObserveInt64(in.fallbacks, n, r.set(attribute.String("reason", reason)))
	}
	for reason, n := range s.FailedReads {
		o.ObserveInt64(in.failures, n, r.set(attribute.String("reason", reason)))
	}
	o.ObserveInt64(in.retries, s.ConflictRetries, r.set(attribute.String("kind", "conflict")))
	o.ObserveInt64(in.retries, s.ReadOnlyRetries, r.set(attribute.String("kind", "read_only")))
	o.ObserveInt64(in.retries, s.ConnLostRetries, r.set(attribute.String("kind", "conn_lost")))
	o.ObserveInt64(in.hedges, s.HedgeWins, r.set(attribute.String("outcome", "won")))
	o.ObserveInt64(in.hedges, s.Hedges-s.HedgeWins, r.set(attribute.String("outcome", "lost")))
	o.ObserveInt64(in.hedges, s.HedgesDenied, r.set(attribute.String("outcome", "denied")))
	o.ObserveInt64(in.rejected, s.FallbackRejected, r.set())
	o.ObserveInt64(in.fallbackPeak, s.FallbackPeak, r.set())
	o.ObserveInt64(in.conflictsAvoided, s.ConflictsAvoided, r.set())
	o.ObserveInt64(in.visibilityWaits, s.PrimaryVisibilityWaits, r.set())
	o.ObserveInt64(in.replayChecks, s.ReplayChecks, r.set(attribute.String("where", "before")))
	o.ObserveInt64(in.replayChecks, s.FlightChecks, r.set(attribute.String("where", "in_flight")))
	o.ObserveInt64(in.tokened, s.TokenedReads, r.set())
	o.ObserveInt64(in.tokenedFallbacks, s.TokenedFallbacks, r.set())
	o.ObserveInt64(in.captures, s.LSNCaptures, r.set())
	o.ObserveFloat64(in.waitTime, s.Wait.Sum.Seconds(), r.set())
	for _, n := range s.Nodes {
		r.observeNode(o, n)
	}
	return nil
}

// roleReplica is NodeStatus.Role of a replica.
const roleReplica = "replica"

func (r *reporter) observeNode(o metric.Observer, n pgreplica.NodeStatus) {
	node, zone := attribute.String("node", n.Addr), attribute.String("zone", n.Zone)
	id := r.set(node, zone)
	in := r.in
	o.ObserveInt64(in.up, bit(n.Err == nil && n.Role != "unknown"), id)
	o.ObserveInt64(in.role, 1, r.set(node, zone, attribute.String("role", n.Role)))
	o.ObserveInt64(in.eligible, bit(n.Reads), id)
	if n.RTT > 0 {
		o.ObserveFloat64(in.rtt, n.RTT.Seconds(), id)
	}
	// Lag and replay only mean something on a replica; a primary showing
	// 0 would read as "caught up" where nodes are averaged.
	if n.Role == roleReplica {
		o.ObserveInt64(in.lagBytes, int64(min(n.LagBytes, 1<<63-1)), id)
		o.ObserveFloat64(in.lagTime, n.LagTime.Seconds(), id)
		o.ObserveInt64(in.paused, bit(n.ReplayPaused), id)
	}
}

func bit(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
