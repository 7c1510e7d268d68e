//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package sockpeek

import (
	"errors"
	"net"
	"syscall"
)

// Peek looks at an idle connection's socket without reading from it
// (recv with MSG_PEEK|MSG_DONTWAIT: one system call, no round trip, and
// whatever is pending stays there for the inner driver). It goes through
// Control, not Read: Read would wait for the socket's read lock, which a
// reader of the inner driver's may hold indefinitely (pgx keeps one in the
// background after a read that timed out).
func Peek(c net.Conn) State { return NewPeeker(c).Peek() }

// Peeker peeks at one connection's socket as Peek does, without
// allocating: the pool looks before every write it lends a connection
// for. It is for one goroutine at a time (the connection's borrower).
type Peeker struct {
	raw     syscall.RawConn
	state   State
	control func(fd uintptr) // p.look, bound once
}

// NewPeeker returns a Peeker for c; one for a connection with no socket
// to look at answers Unknown.
func NewPeeker(c net.Conn) *Peeker {
	p := &Peeker{}
	if sc, ok := c.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			p.raw = raw
		}
	}
	p.control = p.look
	return p
}

// Peek looks at the socket once.
func (p *Peeker) Peek() State {
	if p.raw == nil {
		return Unknown
	}
	p.state = Unknown
	if err := p.raw.Control(p.control); err != nil {
		return Closed // closed on our side
	}
	return p.state
}

func (p *Peeker) look(fd uintptr) {
	var b [1]byte
	n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	switch {
	case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EWOULDBLOCK):
		p.state = Idle
	case errors.Is(err, syscall.EINTR):
		p.state = Unknown
	case err != nil: // ECONNRESET, ETIMEDOUT, ...
		p.state = Closed
	case n == 0: // the server closed its end
		p.state = Closed
	default:
		p.state = Pending
	}
}
