package pgreplica

import (
	"testing"
	"time"

	"github.com/pgreplica/pgreplica/internal/lagtrack"
	"github.com/pgreplica/pgreplica/internal/monoclock"
)

// TestFlightAges: a flight that found the replica behind a write of age a
// makes reads of writes younger than 2a + rtt late; one that found the
// write shown moves the bound a quarter of the way down to its age; the
// bound halves every flightAgesHalfLife, a flight behind raises the
// faded bound again, and no bound passes flightAgesMax.
func TestFlightAges(t *testing.T) {
	var f flightAges
	now := monoclock.Now()
	us := time.Microsecond
	if f.late(0, now) {
		t.Fatal("late with nothing learned")
	}
	f.behind(50*us, 200*us, now) // bound 300 µs
	for _, tc := range []struct {
		age  time.Duration
		late bool
	}{{0, true}, {50 * us, true}, {299 * us, true}, {300 * us, false}, {time.Millisecond, false}} {
		if got := f.late(tc.age, now); got != tc.late {
			t.Errorf("after a flight behind at 50 µs: late(%v) = %v, want %v", tc.age, got, tc.late)
		}
	}
	f.behind(10*us, 200*us, now) // a smaller bound does not lower it
	if !f.late(299*us, now) {
		t.Error("a flight behind at a younger age lowered the bound")
	}
	f.shown(120*us, now) // the write was there at 120 µs: a quarter of the way down
	if f.late(255*us, now) || !f.late(254*us, now) {
		t.Errorf("after a flight that found the write at 120 µs: late(255 µs) = %v, late(254 µs) = %v, want false, true",
			f.late(255*us, now), f.late(254*us, now))
	}
	for range 40 {
		f.shown(120*us, now)
	}
	if f.late(121*us, now) || !f.late(119*us, now) {
		t.Error("many flights that found the write at 120 µs did not bring the bound to it")
	}
	f.shown(time.Millisecond, now) // an older write shown says nothing of younger ones
	if !f.late(119*us, now) {
		t.Error("a write shown at 1 ms raised the bound")
	}
	// It fades: half after a half-life, nothing after many.
	half := now + monoclock.Time(flightAgesHalfLife)
	if f.late(61*us, half) || !f.late(59*us, half) {
		t.Errorf("a half-life later: late(61 µs) = %v, late(59 µs) = %v; want the bound at 60 µs", f.late(61*us, half), f.late(59*us, half))
	}
	later := now + 70*monoclock.Time(flightAgesHalfLife)
	if f.late(0, later) {
		t.Error("the bound did not fade away")
	}
	f.behind(20*us, 100*us, later) // a new bound
	if f.late(140*us, later) || !f.late(139*us, later) {
		t.Error("a bound learned after it faded is not 2 × 20 µs + 100 µs")
	}
	f.behind(30*time.Millisecond, 100*us, later) // a lag spike: capped
	if f.late(flightAgesMax, later) || !f.late(flightAgesMax-us, later) {
		t.Errorf("a flight behind a write 30 ms old: the bound is not flightAgesMax (%v)", flightAgesMax)
	}
}

// TestReplicasLateLearned: a replica whose flights found it behind a
// write older than the read's is predicted late although its measured
// time lag is none; once its flights find writes as young shown, it is
// not.
func TestReplicasLateLearned(t *testing.T) {
	now := time.Now()
	top := snapshot(spec{role: rolePrimary}, spec{role: roleReplica, replay: 1000}, spec{role: roleReplica, replay: 1000})
	top.nodes[0].n.observeRTT(200 * time.Microsecond)
	pl := plan{topo: top, read: true, pendingWriteAt: now.Add(-30 * time.Microsecond)}
	if pl.replicasLate(true, now, new(lagtrack.Tracker)) {
		t.Fatal("late with nothing learned and no lag")
	}
	top.nodes[1].n.flights.behind(30*time.Microsecond, 150*time.Microsecond, monoclock.Of(now))
	if pl.replicasLate(true, now, new(lagtrack.Tracker)) {
		t.Error("late while the other replica may have it")
	}
	top.nodes[2].n.flights.behind(40*time.Microsecond, 150*time.Microsecond, monoclock.Of(now))
	if !pl.replicasLate(true, now, new(lagtrack.Tracker)) {
		t.Error("not late though every replica's flights found it behind older writes")
	}
	for range 40 {
		top.nodes[2].n.flights.shown(20*time.Microsecond, monoclock.Of(now))
	}
	if pl.replicasLate(true, now, new(lagtrack.Tracker)) {
		t.Error("late though a replica showed a younger write")
	}
	// A session's read flies to the replica of its last read: its flights
	// decide, whatever the others'.
	pl.prefer = top.nodes[1].n
	if !pl.replicasLate(true, now, new(lagtrack.Tracker)) {
		t.Error("not late though the session's replica's flights found it behind older writes")
	}
}
