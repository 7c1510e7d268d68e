package pgreplicaprom_test

import (
	"testing"

	"github.com/pgreplica/pgreplica/pgreplicaprom"
)

// The collector's tests on a real cluster are in the integration module
// (integration/pgreplicapromtest), so that this module does not require
// the harness.

func TestNewCollectorNil(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("NewCollector accepted a nil connector")
		}
	}()
	pgreplicaprom.NewCollector(nil)
}
