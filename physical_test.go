package pgreplica

import (
	"testing"

	"github.com/pgreplica/pgreplica/internal/sockpeek"
)

// TestPeekWithoutSocket: a connection with no socket recorded (a test
// double's) is taken as it is.
func TestPeekWithoutSocket(t *testing.T) {
	if got := (&sockets{}).peek(); got != sockpeek.Unknown {
		t.Fatalf("no socket: %v, want Unknown", got)
	}
}
