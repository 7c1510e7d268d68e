package checker

import (
	"context"
	"sync"
	"time"
)

// Sessions held idle across a kill (see kill.go).
//
// A busy session's requirement keeps rising: each of its writes, and each
// of its reads with a pgreplica Session, raises its watermark past what
// any replica had before a kill within milliseconds; so does every write
// of the process for reads that rely on the process default. A router
// that still believes a restarted replica has its old position would
// hardly ever find a read for which that position looks fresh enough. The
// reads exposed are those of a session that read on the replica before
// the kill and comes back after the restart having done nothing in
// between (a user who loaded a page and clicks again a few seconds
// later), and, for the process default, those made after a lull in which
// the process wrote nothing.
//
// So the injector parks sessions just before each kill: half of them, or
// all of them every other kill (a lull). It lets them go on one by one
// over the window in which the restarted replica is behind, the later
// ones after any router has had time to take the replica back. A session
// that goes on re-reads the rows it read and wrote last, and writes
// nothing until the window ends.

// parking holds sessions between operations at the injector's request.
type parking struct {
	mu sync.Mutex
	// parked maps a parked session to when it may go on and until when it
	// must not write; waiting says which of them are held already.
	// changed is closed and replaced on every change.
	parked  map[int]release
	waiting map[int]bool
	changed chan struct{}
}

// release is when a parked session may go on (zero: not known yet) and
// until when it then reads only.
type release struct {
	at, readOnly time.Time
}

func newParking() *parking {
	return &parking{parked: map[int]release{}, waiting: map[int]bool{}, changed: make(chan struct{})}
}

// park holds sessions ids before their next operation until release, and
// waits until each is held, or until patience has passed (an operation may
// take a while to end), or ctx ends.
func (p *parking) park(ctx context.Context, ids []int, patience time.Duration) {
	p.mu.Lock()
	for _, id := range ids {
		p.parked[id] = release{}
	}
	p.notify()
	p.mu.Unlock()
	t := time.NewTimer(patience)
	defer t.Stop()
	for {
		p.mu.Lock()
		held := 0
		for _, id := range ids {
			if p.waiting[id] {
				held++
			}
		}
		ch := p.changed
		p.mu.Unlock()
		if held == len(ids) {
			return
		}
		select {
		case <-ch:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// release lets session id go on at t, reading only until readOnly.
func (p *parking) release(id int, t, readOnly time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.parked[id]; ok {
		p.parked[id] = release{at: t, readOnly: readOnly}
		p.notify()
	}
}

// releaseAll lets every parked session go on now.
func (p *parking) releaseAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.parked)
	clear(p.waiting)
	p.notify()
}

func (p *parking) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// wait holds session id while it is parked, or until deadline or the end
// of ctx. It reports whether the session was held, and until when it must
// not write.
func (p *parking) wait(ctx context.Context, id int, deadline time.Time) (held bool, readOnly time.Time) {
	for {
		p.mu.Lock()
		r, ok := p.parked[id]
		if ok && !r.at.IsZero() && !time.Now().Before(r.at) {
			delete(p.parked, id)
			delete(p.waiting, id)
			p.notify()
			p.mu.Unlock()
			return true, r.readOnly
		}
		if ok && !p.waiting[id] {
			p.waiting[id] = true
			p.notify()
		}
		ch := p.changed
		p.mu.Unlock()
		if !ok {
			return held, time.Time{}
		}
		held = true
		until := deadline
		if !r.at.IsZero() && r.at.Before(until) {
			until = r.at
		}
		t := time.NewTimer(time.Until(until))
		select {
		case <-ch:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		if ctx.Err() != nil || !time.Now().Before(deadline) {
			return held, time.Time{}
		}
	}
}
