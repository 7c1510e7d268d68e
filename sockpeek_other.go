//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package pgreplica

import "net"

// peekConn cannot look at a socket without reading it on this platform:
// the connection is taken as it is (the health check and the outcome
// rules still apply).
func peekConn(net.Conn) sockState { return sockUnknown }
