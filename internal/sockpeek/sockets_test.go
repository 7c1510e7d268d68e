package sockpeek

import (
	"context"
	"net"
	"testing"
)

// TestPeekWithoutSocket: a connection with no socket recorded (a test
// double's) is taken as it is.
func TestPeekWithoutSocket(t *testing.T) {
	if got := (&Sockets{}).Peek(); got != Unknown {
		t.Fatalf("no socket: %v, want Unknown", got)
	}
}

// TestNote: a socket dialed with a context that carries a collection is
// noted in it, and only there; Close closes what was noted, Reset forgets
// it.
func TestNote(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	Note(context.Background(), a) // no collection: nothing to note in
	var s Sockets
	Note(WithSockets(context.Background(), &s), a)
	if got := s.Peek(); got != Unknown { // a pipe has no socket to look at
		t.Fatalf("a pipe: %v, want Unknown", got)
	}
	if !s.Close() {
		t.Fatal("Close found no socket noted")
	}
	if _, err := a.Write([]byte("x")); err == nil {
		t.Fatal("the noted connection is still open after Close")
	}
	s.Reset()
	if s.Close() {
		t.Fatal("Close found sockets after Reset")
	}
}
