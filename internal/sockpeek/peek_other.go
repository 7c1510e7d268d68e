//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package sockpeek

import "net"

// Peek cannot look at a socket without reading it on this platform:
// the connection is taken as it is (the health check and the outcome
// rules still apply).
func Peek(net.Conn) State { return Unknown }

// Peeker answers Unknown on this platform, as Peek does.
type Peeker struct{}

// NewPeeker returns a Peeker.
func NewPeeker(net.Conn) *Peeker { return &Peeker{} }

// Peek answers Unknown.
func (*Peeker) Peek() State { return Unknown }
