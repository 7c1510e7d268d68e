package pgreplica

import (
	"sync"
	"time"
)

// lagTracker keeps the monitor's recent samples of the primary's WAL
// position. A replica's time lag is how long ago the primary passed the
// replica's replay position: no clock sync between hosts is needed, it does
// not grow on an idle primary (nothing passes the replica), and it keeps
// growing for a paused or disconnected replica while writes continue.
type lagTracker struct {
	mu      sync.Mutex
	samples [256]lsnSample // ring, oldest overwritten
	next    int
	count   int
}

type lsnSample struct {
	at  time.Time
	lsn LSN
}

func (l *lagTracker) add(at time.Time, lsn LSN) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.samples[l.next] = lsnSample{at, lsn}
	l.next = (l.next + 1) % len(l.samples)
	l.count = min(l.count+1, len(l.samples))
}

// passedAt returns when the primary was first seen past replay (the zero
// time when it has not passed it). When every kept sample is past replay,
// the oldest sample's time is a lower bound on the lag.
func (l *lagTracker) passedAt(replay LSN) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	var at time.Time
	for i := 0; i < l.count; i++ {
		s := l.samples[(l.next-1-i+len(l.samples))%len(l.samples)]
		if s.lsn <= replay {
			break
		}
		at = s.at
	}
	return at
}
