package pgreplicaotel_test

import (
	"testing"

	"github.com/pgreplica/pgreplica/pgreplicaotel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// Register's tests on a real cluster are in the integration module
// (integration/pgreplicaoteltest), so that this module does not require
// the harness.

func TestRegisterNil(t *testing.T) {
	if _, err := pgreplicaotel.Register(nil, sdkmetric.NewMeterProvider()); err == nil {
		t.Error("Register accepted a nil connector")
	}
}
