// Package lagtrack keeps recent samples of the primary's WAL position over
// time (Tracker) and reads them back both ways: the primary's position at
// a time (PositionAt) and when it passed a position (PassedAt). The router
// uses them for a replica's lag in bytes and in time, and for how far back
// a read's lag bound reaches. It needs no router: positions are plain
// uint64 (the root package's LSN) and the times are the caller's.
package lagtrack

import (
	"sync"
	"time"
)

// Tracker keeps the monitor's recent samples of the primary's WAL
// position. A replica's time lag is how long before the replica's own
// sample the primary passed the position the replica had replayed: no
// clock sync between hosts is needed, it stays 0 on an idle primary
// (nothing passes the replica), and it keeps growing for a paused or
// disconnected replica while writes continue. The zero value is empty and
// ready to use.
type Tracker struct {
	mu      sync.Mutex
	samples [1024]sample // ring, oldest overwritten: ≥ 4 min at 250ms
	next    int
	count   int
}

type sample struct {
	at  time.Time
	lsn uint64
}

// Add records a primary sample; the same sample twice is kept once.
func (l *Tracker) Add(at time.Time, lsn uint64) { l.add(at, lsn, false) }

// AddAtLeast records a lower bound of the primary's position (what a
// replica had received by then): one below the newest sample is raised to
// it, since the primary's position never goes back.
func (l *Tracker) AddAtLeast(at time.Time, lsn uint64) { l.add(at, lsn, true) }

func (l *Tracker) add(at time.Time, lsn uint64, atLeast bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.count > 0 {
		newest := l.samples[(l.next-1+len(l.samples))%len(l.samples)]
		if !at.After(newest.at) {
			return
		}
		if atLeast {
			lsn = max(lsn, newest.lsn)
		}
	}
	l.samples[l.next] = sample{at, lsn}
	l.next = (l.next + 1) % len(l.samples)
	l.count = min(l.count+1, len(l.samples))
}

// PositionAt estimates the primary's position at time at, interpolating
// between the samples around it; after the newest sample it is the newest
// (the primary may have written since, unseen). ok is false without a
// sample at or before at.
func (l *Tracker) PositionAt(at time.Time) (pos uint64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var after sample // the oldest sample seen so far after at
	for i := 0; i < l.count; i++ {
		s := l.samples[(l.next-1-i+2*len(l.samples))%len(l.samples)]
		if s.at.After(at) {
			after = s
			continue
		}
		if after.at.IsZero() || after.lsn <= s.lsn {
			return s.lsn, true
		}
		frac := float64(at.Sub(s.at)) / float64(after.at.Sub(s.at))
		return s.lsn + uint64(frac*float64(after.lsn-s.lsn)), true
	}
	return 0, false
}

// PassedAt estimates when the primary's position went past replay,
// interpolating between the last sample at or below it and the first one
// above it. ok is false when the primary has not passed it. When every kept
// sample is past replay, the oldest sample's time is the estimate (a lower
// bound on the lag).
func (l *Tracker) PassedAt(replay uint64) (at time.Time, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var after sample // the oldest sample seen so far above replay
	for i := 0; i < l.count; i++ {
		s := l.samples[(l.next-1-i+2*len(l.samples))%len(l.samples)]
		if s.lsn <= replay {
			if !ok {
				return time.Time{}, false
			}
			if s.lsn == replay {
				// The replica sits on a sample: all we know is that the
				// primary was seen past it at the next one (with sparse
				// writes, interpolating would charge a whole interval).
				return after.at, true
			}
			frac := float64(replay-s.lsn) / float64(after.lsn-s.lsn)
			return s.at.Add(time.Duration(frac * float64(after.at.Sub(s.at)))), true
		}
		after, ok = s, true
	}
	return after.at, ok
}

// ReachedAt estimates when the primary's position first reached pos,
// interpolating between the last sample below it and the first one at or
// above it. ok is false when no sample has reached it yet. When every
// kept sample is at or above pos, the oldest sample's time is the
// estimate (an upper bound).
//
// It is PassedAt for a position the primary may still sit on: an idle
// primary reached the position of its last write when it wrote it, though
// nothing has passed it since, and a replica applies that write from then
// on (after its apply delay).
func (l *Tracker) ReachedAt(pos uint64) (at time.Time, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first sample // the oldest sample seen so far at or above pos
	for i := 0; i < l.count; i++ {
		s := l.samples[(l.next-1-i+2*len(l.samples))%len(l.samples)]
		if s.lsn < pos {
			if !ok {
				return time.Time{}, false
			}
			frac := float64(pos-s.lsn) / float64(first.lsn-s.lsn)
			return s.at.Add(time.Duration(frac * float64(first.at.Sub(s.at)))), true
		}
		first, ok = s, true
	}
	return first.at, ok
}
