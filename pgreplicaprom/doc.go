// Package pgreplicaprom exports a pgreplica connector's Stats as Prometheus
// metrics.
//
// NewCollector returns a prometheus.Collector; register it with your own
// registry (the package touches no global one) and serve it as usual:
//
//	db, _ := sql.Open("pgreplica", dsn)
//	c, _ := pgreplica.ConnectorOf(ctx, db)
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(pgreplicaprom.NewCollector(c))
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// Each scrape reads one (*pgreplica.Connector).Stats snapshot and emits,
// with the default namespace "pgreplica":
//
//	pgreplica_reads_total{route}                 counter: route is replica, primary, fallback or recent_write
//	pgreplica_read_fallbacks_total{reason}       counter: reason is timeout, no_replica or conflict
//	pgreplica_read_fallbacks_rejected_total      counter: reads refused with ErrFallbackLimit
//	pgreplica_read_fallbacks_peak                gauge: most fallback reads on the primary at once
//	pgreplica_reads_failed_total{reason}         counter: ErrNoFreshReplica returned (FallbackError)
//	pgreplica_read_conflicts_avoided_total       counter: reads sent to the primary for their conflicts
//	pgreplica_primary_visibility_waits_total     counter: session reads that waited for the primary to show a commit
//	pgreplica_tokened_reads_total                counter: reads with a position requirement
//	pgreplica_tokened_read_fallbacks_total       counter: of those, fell back or failed
//	pgreplica_lsn_captures_total                 counter: writes whose commit LSN was captured
//	pgreplica_read_retries_total{kind}           counter: kind is conflict, read_only or conn_lost
//	pgreplica_read_hedges_total{outcome}         counter: outcome is won, lost or denied
//	pgreplica_replay_checks_total{where}         counter: where is before (a round trip) or in_flight
//	pgreplica_replica_wait_seconds               histogram: wait for a fresh replica
//	pgreplica_node_up{node,zone}                 gauge: 1 if the last probe answered
//	pgreplica_node_role{node,zone,role}          gauge: always 1; role is primary, replica or unknown
//	pgreplica_node_reads_eligible{node,zone}     gauge: 1 if the router sends reads there
//	pgreplica_node_rtt_seconds{node,zone}        gauge: smoothed probe round trip
//	pgreplica_node_lag_bytes{node,zone}          gauge, replicas only: WAL bytes behind the primary
//	pgreplica_node_lag_seconds{node,zone}        gauge, replicas only: time behind the primary
//	pgreplica_node_replay_paused{node,zone}      gauge, replicas only: 1 if replay is paused
//
// node is host:port as in the DSN, zone the host's zone (empty unless
// configured). A node's role is "unknown" while its probe fails. Every
// counter of Stats is here (a test holds the collector to that);
// Stats.TokenedFallbackRatio is the ratio below, over the connector's life.
//
// Useful queries:
//
//	# Share of read-your-writes reads the replicas could not serve: the
//	# earliest warning that replicas fall behind.
//	rate(pgreplica_tokened_read_fallbacks_total[5m]) / rate(pgreplica_tokened_reads_total[5m])
//
//	# p99 wait for a fresh replica.
//	histogram_quantile(0.99, rate(pgreplica_replica_wait_seconds_bucket[5m]))
//
//	# Offload: share of reads served by replicas.
//	sum(rate(pgreplica_reads_total{route="replica"}[5m])) / sum(rate(pgreplica_reads_total[5m]))
//
//	# Which node is the primary.
//	pgreplica_node_role{role="primary"}
//
// Several connectors in one registry need a label that tells them apart:
// WithConstLabels(prometheus.Labels{"db": "orders"}).
package pgreplicaprom
