package pgreplicaotel

import "go.opentelemetry.io/otel/attribute"

// Option configures Register.
type Option func(*options)

type options struct {
	attrs []attribute.KeyValue
}

// WithAttributes adds attributes to every observation, e.g.
// attribute.String("db", "orders") to tell several connectors apart.
func WithAttributes(attrs ...attribute.KeyValue) Option {
	return func(o *options) { o.attrs = append(o.attrs, attrs...) }
}
