package patronitest

import (
	"time"

	"github.com/pgreplica/pgreplica"
)

// routerView records when the router's own probes first showed each
// server as the primary on a timeline (its Nodes, every 10 ms): the
// router's share of the time from a promotion to the first write on the
// new primary, the rest being the write's and the workload's.
type routerView struct {
	stop, done chan struct{}
	seen       []viewEvent
}

// viewEvent: the router showed the server at addr as the primary on
// timeline at the time at.
type viewEvent struct {
	addr     string
	timeline uint32
	at       time.Time
}

// watchRouter starts watching cn; nil (the naive router has none)
// watches nothing.
func watchRouter(cn *pgreplica.Connector) *routerView {
	v := &routerView{stop: make(chan struct{}), done: make(chan struct{})}
	if cn == nil {
		close(v.done)
		return v
	}
	go func() {
		defer close(v.done)
		last := map[string]uint32{}
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			for _, n := range cn.Nodes() {
				if n.Role == pgreplica.RolePrimary && n.Err == nil && n.Timeline != last[n.Address] {
					last[n.Address] = n.Timeline
					v.seen = append(v.seen, viewEvent{addr: n.Address, timeline: n.Timeline, at: time.Now()})
				}
			}
			select {
			case <-v.stop:
				return
			case <-t.C:
			}
		}
	}()
	return v
}

// Stop ends the watch and returns what it saw, in time order.
func (v *routerView) Stop() []viewEvent {
	select {
	case <-v.stop:
	default:
		close(v.stop)
	}
	<-v.done
	return v.seen
}

// sawPrimary returns when the router first showed addr as the primary on
// timeline tl.
func sawPrimary(seen []viewEvent, addr string, tl int) (time.Time, bool) {
	for _, e := range seen {
		if e.addr == addr && int(e.timeline) == tl {
			return e.at, true
		}
	}
	return time.Time{}, false
}
