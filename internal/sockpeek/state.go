// Package sockpeek looks at an idle connection's socket without reading
// from it: one system call, no round trip, and whatever is pending stays
// there for the inner driver. The pool uses it to replace a connection the
// server closed or terminated while it sat idle, before a write is sent on
// it. It also keeps the sockets an inner driver dialed for one connection
// (Sockets, noted by the dial function pgreplica gives the driver), which
// are what it looks at, and what the router closes to cut off a statement
// whose server stopped answering. It knows nothing of the router.
package sockpeek

// State is what a look at an idle connection's socket found.
type State uint8

const (
	// Unknown: no socket to look at, or the platform cannot look
	// without reading.
	Unknown State = iota
	// Idle: nothing to read, the server has not closed it.
	Idle
	// Pending: bytes arrived while no statement ran: on an idle
	// PostgreSQL connection, almost always the FATAL error of a backend
	// that was terminated (57P01 on a fast shutdown), followed by EOF.
	Pending
	// Closed: the server closed or reset the connection.
	Closed
)
