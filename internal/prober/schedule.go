package prober

import (
	"context"
	"time"
)

// maxBackoff caps how rarely a failing host is probed.
const maxBackoff = 2 * time.Second

func (p *Prober) loop(ctx context.Context) {
	defer func() {
		p.lock.lock(context.Background()) // a capture ends within a probe timeout
		p.closeConn()
		p.lock.unlock()
	}()
	var probed time.Time // when the last probe was sent
	// The first probe goes at once, on a new connection (no round trip
	// measured); the first subscriber's poke sends a second right behind
	// it, which measures one for latency-based selection.
	poked := true
	for {
		wait, busy, idle := p.intervals()
		var lent int64
		if p.last != nil && p.last.Role == Primary {
			lent = p.statements() // only the primary's traffic stands in
		}
		if poked || !p.captureStandsIn(probed, busy, idle) && !p.trafficStandsIn(probed, idle, lent) {
			probed = time.Now()
			if !p.probeOnce(ctx) {
				return
			}
		}
		p.lent = lent
		if p.failures > 1 {
			// Banned: probe a failing host less often, up to a cap.
			wait = min(wait<<min(p.failures-1, 10), maxBackoff)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
			poked = false
		case <-p.wakeCh:
			t.Stop()
			poked = true
		}
	}
}

// intervals returns how long to wait for the next probe (the shortest
// any subscriber asks now: its busy interval while its statements run,
// its idle one while they do not) and the shortest of each setting.
func (p *Prober) intervals() (wait, busy, idle time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.subs) == 0 {
		return p.cfg.Interval, p.cfg.Interval, p.cfg.Interval
	}
	for i, s := range p.subs {
		w, b, id := s.Intervals()
		if i == 0 {
			wait, busy, idle = w, b, id
			continue
		}
		wait, busy, idle = min(wait, w), min(busy, b), min(idle, id)
	}
	return wait, busy, idle
}

// captureStandsIn reports whether the primary's probe due now may be left
// out: a capture read the primary's position on the probe connection
// within the last interval (statements run, so traffic shows the primary
// answering, and the capture's position is a sample of the lag tracker,
// as the probe's would be), and the last probe was sent less than
// standInLimit ago: role, timeline and the rest are still read that
// often. A poke (a failed statement, a refresh) always probes.
func (p *Prober) captureStandsIn(probed time.Time, busy, idle time.Duration) bool {
	prev := p.last
	if prev == nil || prev.Err != nil || prev.Role != Primary {
		return false
	}
	now := time.Now()
	at := p.capturedAt.Load()
	return now.Sub(probed) < standInLimit(idle) && at != 0 && time.Duration(now.UnixNano()-at) < busy
}

// standInLimit is how long traffic or captures may stand in for the
// primary's probes: two idle intervals. What only a probe reads of a
// primary that answers statements (its role, timeline, standbys, default
// synchronous_commit) changes by a failover or an operator's hand; a
// failover fails its statements, which poke a probe at once, and the
// replicas' probes find the new primary. A busy process then costs the
// primary a probe every two seconds by default, half of an idle one's.
func standInLimit(idle time.Duration) time.Duration { return 2 * idle }

// trafficStandsIn reports whether the primary's probe due now may be left
// out because statements ran on it since the last look (its pools lent
// connections: lent moved): a primary that answers them is up, and one
// that fails a statement is poked at once. The probe still goes once
// standInLimit, for its role, timeline and a lag sample, and a write's
// position is read when something needs it, not by probes. Replicas are
// probed at the busy rate: their replay positions route reads.
func (p *Prober) trafficStandsIn(probed time.Time, idle time.Duration, lent int64) bool {
	prev := p.last
	if prev == nil || prev.Err != nil || prev.Role != Primary {
		return false
	}
	return lent != p.lent && time.Since(probed) < standInLimit(idle)
}

// statements sums the connections the subscribers' pools on this
// address ever lent to statements.
func (p *Prober) statements() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var lent int64
	for _, s := range p.subs {
		lent += s.Statements()
	}
	return lent
}
