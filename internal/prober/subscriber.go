package prober

import (
	"database/sql/driver"
	"time"
)

// Subscriber is a handle's node on a prober's address: it takes every
// answer, says how often it wants probes, and lends idle connections of
// its pool. The prober calls it per probe or capture, under its lock:
// the calls to one prober's subscribers never overlap.
type Subscriber interface {
	// Apply takes a probe's answer, which every subscriber shares: it
	// must not be changed.
	Apply(st *Status)
	// Intervals are how long the subscriber wants between probes now
	// (busy or idle, by whether its statements run) and its two
	// settings: while its statements run and while they do not.
	Intervals() (now, busy, idle time.Duration)
	// LendIdle lends an idle connection of the subscriber's pool at
	// once, or returns nil: it never waits nor makes the pool dial.
	LendIdle() Lent
	// Statements counts the connections the subscriber's pool ever lent
	// to statements (its lends to the prober left out).
	Statements() int64
}

// Lent is a pooled connection lent to a probe or a capture.
type Lent interface {
	Conn() driver.Conn
	// Since is when the connection was opened.
	Since() time.Time
	// CloseSockets closes the connection's sockets: the one way to stop
	// a driver waiting for a server that answers nothing.
	CloseSockets()
	// GiveBack returns the connection to its pool; err is what ran on it
	// returned (the pool drops a broken connection).
	GiveBack(err error)
}
