// Package monoclock is the router's clock: monotonic nanoseconds since an
// epoch fixed when the package loads. One clock for the process, so that
// the times a Session keeps of its reads compare with any connector's
// connections and probes; monotonic, so that NTP adjusting the wall clock
// moves none of them. A borrow reads it once and the lease reuses that
// reading: on a virtual machine a clock read costs tens of nanoseconds,
// time.Now two of them.
package monoclock

import "time"

var epoch = time.Now()

// Time is a time on the router's clock.
type Time int64

// Now reads the clock.
func Now() Time { return Time(time.Since(epoch)) }

// Of puts t, a reading of time.Now (which carries the monotonic clock),
// on the router's clock.
func Of(t time.Time) Time { return Time(t.Sub(epoch)) }

// Sub is the time from o to m.
func (m Time) Sub(o Time) time.Duration { return time.Duration(m - o) }

// Wall is m as a reading of time.Now would give it.
func (m Time) Wall() time.Time { return epoch.Add(time.Duration(m)) }
