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
// it find the replica behind. It halves every flightAgesHalfLife since it
// was last set: a flight that found the replica behind during a lag spike
// must not send reads of writes that old to the primary for long (the
// fleet's reads, tens of milliseconds after their writes, belong on the
// replicas), and once it has fallen below a read's write age the read
// flies and looks again: a round trip more every so often, rather than
// the primary serving such reads for good after replication got faster.
type flightAges struct {
	lateUnder atomic.Int64 // nanoseconds when set; 0 when no flight found it behind
	set       atomic.Int64 // monoclock.Time lateUnder was set at
}

// flightAgesHalfLife is how fast a bound fades.
const flightAgesHalfLife = time.Second

// flightAgesMax caps the bound: what it learns is how long replication
// takes to bring a write to a replica (a fraction of a millisecond to a
// few on a healthy network), not a lag spike, which a flight meets at
// any age and the monitor's lag, the second flight and the wait's
// prediction already handle. Uncapped, one flight behind in a spike sent
// every read of a write tens of milliseconds old to the primary (the
// fleet's offload at 16 processes fell from 98 % to 24 %).
const flightAgesMax = 5 * time.Millisecond

// bound returns the bound as it stands at now.
func (f *flightAges) bound(now monoclock.Time) int64 {
	under := f.lateUnder.Load()
	if under == 0 {
		return 0
	}
	halvings := now.Sub(monoclock.Time(f.set.Load())) / flightAgesHalfLife
	if halvings >= 63 {
		return 0
	}
	return under >> uint(max(halvings, 0))
}

// behind records a flight sent age after the write it checked for that
// found the replica behind it, on a connection whose round trip is rtt:
// reads of writes younger than twice that age and one more round trip
// (a margin: the write's WAL was still on its way), at most
// flightAgesMax, are predicted late.
func (f *flightAges) behind(age, rtt time.Duration, now monoclock.Time) {
	f.store(max(f.bound(now), int64(min(2*age+rtt, flightAgesMax))), now)
}

// shown records a flight sent age after the write it checked for that
// found the write replayed: the bound moves a quarter of the way down to
// that age. Not all the way: near the bound a replica shows some writes
// in time and not others, and a flight that finds it behind costs three
// round trips (it, a second flight, the primary) where the primary costs
// one, so a few such reads must agree before reads of younger writes fly.
func (f *flightAges) shown(age time.Duration, now monoclock.Time) {
	if cur := f.bound(now); cur > int64(age) {
		f.store(cur-(cur-int64(age))/4, now)
	}
}

// store sets the bound (racing flights may each set theirs: any is a
// bound some flight just saw).
func (f *flightAges) store(under int64, now monoclock.Time) {
	f.lateUnder.Store(under)
	f.set.Store(int64(now))
}

// late reports whether a read of a write age old is predicted to find
// the replica behind it.
func (f *flightAges) late(age time.Duration, now monoclock.Time) bool {
	return int64(age) < f.bound(now)
}
