package pgreplica

import "time"

// The router's clock: monotonic nanoseconds since clockEpoch, fixed when
// the package loads. One clock for the process, so that the times a
// Session keeps of its reads compare with any connector's connections
// and probes; monotonic, so that NTP adjusting the wall clock moves none
// of them. A borrow reads it once (hostPool.usable) and the lease reuses
// that reading: on a virtual machine a clock read costs tens of
// nanoseconds, time.Now two of them.
var clockEpoch = time.Now()

// mono is a time on the router's clock.
type mono int64

func monoNow() mono { return mono(time.Since(clockEpoch)) }

// monoOf puts t, a reading of time.Now (which carries the monotonic
// clock), on the router's clock.
func monoOf(t time.Time) mono { return mono(t.Sub(clockEpoch)) }

// sub is the time from o to m.
func (m mono) sub(o mono) time.Duration { return time.Duration(m - o) }
