package sockpeek

import (
	"context"
	"net"
	"sync"
)

// Sockets collects the network connections an inner driver dials while
// connecting one physical connection. pgx and lib/pq dial through a
// function pgreplica supplies (the root's innerConnector), which notes
// each socket (Note) in the collection the connect context carries
// (WithSockets).
type Sockets struct {
	mu    sync.Mutex
	conns []net.Conn
	// peeker looks at peeked, the last of conns, made at the first look.
	peeker *Peeker
	peeked net.Conn
}

type socketsKey struct{}

// WithSockets returns ctx carrying s, for the connect that fills it.
func WithSockets(ctx context.Context, s *Sockets) context.Context {
	return context.WithValue(ctx, socketsKey{}, s)
}

// Note records c in the collection ctx carries, if any (a cancel request
// dialed with a statement's context carries none).
func Note(ctx context.Context, c net.Conn) {
	if s, ok := ctx.Value(socketsKey{}).(*Sockets); ok {
		s.mu.Lock()
		s.conns = append(s.conns, c)
		s.mu.Unlock()
	}
}

// Peek looks at the connection's socket without consuming anything (see
// Peeker). The last socket dialed is the connection's: an inner driver
// that falls back (sslmode=prefer) dials again after closing the first.
func (s *Sockets) Peek() State {
	s.mu.Lock()
	var c net.Conn
	if n := len(s.conns); n > 0 {
		c = s.conns[n-1]
	}
	if c != nil && s.peeked != c {
		s.peeker, s.peeked = NewPeeker(c), c
	}
	pk := s.peeker
	s.mu.Unlock()
	if c == nil {
		return Unknown
	}
	return pk.Peek()
}

// Reset forgets the sockets of a connection that is gone.
func (s *Sockets) Reset() {
	s.mu.Lock()
	s.conns, s.peeker, s.peeked = nil, nil, nil
	s.mu.Unlock()
}

// Close closes the sockets and reports whether there were any.
func (s *Sockets) Close() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.Close()
	}
	return len(s.conns) > 0
}
