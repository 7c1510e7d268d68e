package pgreplicaprom

import "github.com/prometheus/client_golang/prometheus"

// Option configures a Collector.
type Option func(*options)

type options struct {
	namespace   string
	constLabels prometheus.Labels
}

// DefaultNamespace prefixes every metric name unless WithNamespace says
// otherwise.
const DefaultNamespace = "pgreplica"

// WithNamespace sets the prefix of every metric name (default "pgreplica");
// "" leaves the names unprefixed.
func WithNamespace(ns string) Option {
	return func(o *options) { o.namespace = ns }
}

// WithConstLabels adds labels to every metric. Use it to register
// collectors for several connectors in one registry, e.g.
// prometheus.Labels{"db": "orders"}: without a distinguishing label the
// registry rejects the second collector as a duplicate.
func WithConstLabels(l prometheus.Labels) Option {
	return func(o *options) { o.constLabels = l }
}
