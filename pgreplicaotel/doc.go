// Package pgreplicaotel reports a pgreplica connector's Stats as
// OpenTelemetry metrics.
//
// Register creates observable instruments on a meter of the given
// MeterProvider and one callback that reads a single
// (*pgreplica.Connector).Stats snapshot per collection:
//
//	db, _ := sql.Open("pgreplica", dsn)
//	c, _ := pgreplica.ConnectorOf(ctx, db)
//	reg, err := pgreplicaotel.Register(c, otel.GetMeterProvider())
//	...
//	defer reg.Unregister()
//
// Instruments (attributes in braces):
//
//	pgreplica.reads{route}                    counter {read}: route is replica, primary, fallback or recent_write
//	pgreplica.read.fallbacks{reason}          counter {read}: reason is timeout, no_replica or conflict
//	pgreplica.read.fallbacks.rejected         counter {read}: refused with ErrFallbackLimit
//	pgreplica.read.fallbacks.peak             gauge {read}: most fallback reads on the primary at once
//	pgreplica.read.failures{reason}           counter {read}: ErrNoFreshReplica returned (FallbackError)
//	pgreplica.read.conflicts_avoided          counter {read}: sent to the primary for their conflicts
//	pgreplica.primary.visibility_waits        counter {read}: session reads that waited for the primary to show a commit
//	pgreplica.read.retries{kind}              counter {retry}: kind is conflict, read_only or conn_lost
//	pgreplica.read.hedges{outcome}            counter {read}: outcome is won, lost or denied
//	pgreplica.replay_checks{where}            counter {check}: where is before (a round trip) or in_flight
//	pgreplica.tokened_reads                   counter {read}: reads with a position requirement
//	pgreplica.tokened_read.fallbacks          counter {read}: of those, fell back or failed
//	pgreplica.lsn.captures                    counter {write}: writes whose commit LSN was captured
//	pgreplica.replica.wait.time               counter s: total wait for a fresh replica
//	pgreplica.node.up{node,zone}              gauge: 1 if the last probe answered
//	pgreplica.node.role{node,zone,role}       gauge: always 1; role is primary, replica or unknown
//	pgreplica.node.reads_eligible{node,zone}  gauge: 1 if the router sends reads there
//	pgreplica.node.rtt{node,zone}             gauge s: smoothed probe round trip
//	pgreplica.node.lag{node,zone}             gauge By, replicas only: WAL bytes behind the primary
//	pgreplica.node.lag_time{node,zone}        gauge s, replicas only: time behind the primary
//	pgreplica.node.replay_paused{node,zone}   gauge, replicas only: 1 if replay is paused
//
// node is host:port as in the DSN, zone the host's zone (empty unless
// configured). WithAttributes adds attributes to every observation. Every
// counter of Stats is reported (a test holds Register to that);
// Stats.TokenedFallbackRatio is the ratio below, over the connector's life.
//
// The attribute keys are those of the Prometheus collector in
// pgreplicaprom, and when OpenTelemetry's Prometheus exporter adds unit and
// _total suffixes most names become that collector's metric names, so
// dashboards carry over; the exceptions are pgreplica.read.failures
// (pgreplica_reads_failed_total there), pgreplica.node.lag_time
// (pgreplica_node_lag_seconds) and pgreplica.replica.wait.time (a
// histogram there).
//
// The ratio of pgreplica.tokened_read.fallbacks to pgreplica.tokened_reads
// is the earliest warning that replicas fall behind; the mean wait is
// pgreplica.replica.wait.time over pgreplica.tokened_reads. The OpenTelemetry
// API has no asynchronous histogram, so the wait distribution is not
// reported here: for percentiles, register pgreplicaprom's collector in a
// Prometheus registry and scrape it, or feed that registry to the SDK with
// the OpenTelemetry Prometheus bridge (go.opentelemetry.io/contrib/bridges/prometheus).
package pgreplicaotel
