package pgreplica

import (
	"sync/atomic"
	"time"

	"github.com/pgreplica/pgreplica/internal/monoclock"
)

// What the flights learn of a replica's replay delay: a read that
// carries its check in its flight against a write of its process whose
// age it knows finds the write on the replica (shown) or not yet
// (behind). A read of a write younger than the age at which flights
// found the replica behind is predicted to find it behind again
// (plan.replicasLate), and goes to the primary at once: one round trip,
// where a flight that finds the replica behind, a second flight and then
// the primary cost three. The monitor's time lag cannot tell this: it is
// sampled at probe intervals, and a replica a millisecond behind shows
// none.

// flightAges is a replica's learned bound: reads of writes younger than
// lateUnder find it behind.
type flightAges struct {
	lateUnder atomic.Int64 // nanoseconds; 0 when no flight found it behind
	raised    atomic.Int64 // monoclock.Time of the last flight that found it behind
}

// flightAgesMemory is how long a bound lasts without a flight that finds
// the replica behind again. Once it lapses, one read of a young write
// flies to look: a round trip more every so often, rather than the
// primary serving such reads for good after replication got faster.
const flightAgesMemory = 30 * time.Second

// behind records a flight sent age after the write it checked for that
// found the replica behind it, on a connection whose round trip is rtt:
// reads of writes younger than twice that age and one more round trip
// (a margin: the write's WAL was still on its way) are predicted late.
func (f *flightAges) behind(age, rtt time.Duration, now monoclock.Time) {
	bound := int64(2*age + rtt)
	if now.Sub(monoclock.Time(f.raised.Load())) > flightAgesMemory {
		f.lateUnder.Store(bound) // a lapsed bound is not raised from
	} else {
		atomicMaxInt64(&f.lateUnder, bound)
	}
	f.raised.Store(int64(now))
}

// shown records a flight sent age after the write it checked for that
// found the write replayed: the bound moves a quarter of the way down to
// that age. Not all the way: near the bound a replica shows some writes
// in time and not others, and a flight that finds it behind costs three
// round trips (it, a second flight, the primary) where the primary costs
// one, so a few such reads must agree before reads of younger writes fly.
func (f *flightAges) shown(age time.Duration) {
	for {
		cur := f.lateUnder.Load()
		if cur <= int64(age) || f.lateUnder.CompareAndSwap(cur, cur-(cur-int64(age))/4) {
			return
		}
	}
}

// late reports whether a read of a write age old is predicted to find
// the replica behind it.
func (f *flightAges) late(age time.Duration, now monoclock.Time) bool {
	under := f.lateUnder.Load()
	return under != 0 && int64(age) < under && now.Sub(monoclock.Time(f.raised.Load())) <= flightAgesMemory
}

// atomicMaxInt64 raises a to v if v is higher.
func atomicMaxInt64(a *atomic.Int64, v int64) {
	for {
		cur := a.Load()
		if v <= cur || a.CompareAndSwap(cur, v) {
			return
		}
	}
}
