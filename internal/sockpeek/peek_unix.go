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
func Peek(c net.Conn) State {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return Unknown
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return Unknown
	}
	state := Unknown
	err = raw.Control(func(fd uintptr) {
		var b [1]byte
		n, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case errors.Is(rerr, syscall.EAGAIN), errors.Is(rerr, syscall.EWOULDBLOCK):
			state = Idle
		case errors.Is(rerr, syscall.EINTR):
			state = Unknown
		case rerr != nil: // ECONNRESET, ETIMEDOUT, ...
			state = Closed
		case n == 0: // the server closed its end
			state = Closed
		default:
			state = Pending
		}
	})
	if err != nil {
		return Closed // closed on our side
	}
	return state
}
