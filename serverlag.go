package pgreplica

import (
	"time"

	"github.com/pgreplica/pgreplica/internal/lagtrack"
)

// How far behind each server of an endpoint is. A node that is one
// server has its probe's apply delay, pause and time lag, from which a
// read predicts whether waiting for it can end in time (futile) and
// whether it would answer after the primary (replicasLate). Behind an
// endpoint the probe reaches one server only; the others are seen by the
// reads' replay checks and flights, each on the connection's own server.
// So each server keeps its latest look: the position it was seen at and
// when, and what a probe that reached it read. A server that had not
// replayed what the primary passed at T when it was looked at, at L, is
// at least L−T behind: a position the primary passes at P is not
// replayed there before P+(L−T), unless its lag has shrunk since, which a
// look older than serverLookFresh is not trusted to rule out.

// serverLook is one look at a server behind an endpoint.
type serverLook struct {
	replay LSN
	at     time.Time
	// probedAt is when a probe last reached the server (zero: none
	// recently), with the apply delay and pause it read.
	probedAt   time.Time
	applyDelay time.Duration
	paused     bool
}

// serverLookFresh is how long a look predicts a server's lag: as long as
// a single server's probe does (the monitor's interval while statements
// run). The lag of a replica changes with the load on it and with its
// apply delay; a look that predicted a server too late to wait for
// expires, and the next read looks again (one wait, rather than the
// primary serving every read after the lag has gone). Behind an HAProxy
// endpoint under the checker's faults, 100 ms, 250 ms and 500 ms gave
// throughputs within the runs' spread, and the longer, the fewer reads
// the replicas served (11 %, 10 %, 7 %).
const serverLookFresh = 250 * time.Millisecond

// sawReplay records that a check or a flight found srv at l.
func (srv *server) sawReplay(l LSN, at time.Time) {
	look := &serverLook{replay: l, at: at}
	if prev := srv.look.Load(); prev != nil {
		look.probedAt, look.applyDelay, look.paused = prev.probedAt, prev.applyDelay, prev.paused
	}
	srv.look.Store(look) // racing looks: either is a recent one
}

// sawProbe records what a probe that reached srv read of it.
func (srv *server) sawProbe(st *nodeStatus) {
	srv.look.Store(&serverLook{replay: st.lsn, at: st.at, probedAt: st.at, applyDelay: st.applyDelay, paused: st.paused})
}

// behind predicts how long after the primary passes a position srv
// replays it, from a look no older than serverLookFresh at now (known);
// paused: a probe found its replay paused, and it replays nothing.
func (srv *server) behind(now time.Time, primary *lagtrack.Tracker) (lag time.Duration, paused, known bool) {
	look := srv.look.Load()
	if look == nil || now.Sub(look.at) > serverLookFresh {
		return 0, false, false
	}
	if !look.probedAt.IsZero() && now.Sub(look.probedAt) <= serverLookFresh {
		lag, paused = look.applyDelay, look.paused
	}
	if passed, ok := primary.PassedAt(uint64(look.replay)); ok {
		lag = max(lag, look.at.Sub(passed))
	}
	return lag, paused, true
}

// serversLate reports whether every server behind endpoint n is known to
// replay a write later than ahead after it (a paused one: ever); a server
// not looked at recently may be on time, and so may an endpoint with no
// server known.
func (n *node) serversLate(ahead time.Duration, now time.Time, primary *lagtrack.Tracker) bool {
	late := false
	n.servers.each(now, func(srv *server) bool {
		lag, paused, known := srv.behind(now, primary)
		late = known && (paused || lag > ahead)
		return late
	})
	return late
}

// serversFutile reports whether no server behind endpoint n can have
// replayed need, which the primary passed at passed, by deadline (see
// tooLate). A server not looked at recently may make it, and so may an
// endpoint with no server known.
func (n *node) serversFutile(need LSN, passed, deadline, now time.Time, primary *lagtrack.Tracker) bool {
	futile := false
	n.servers.each(now, func(srv *server) bool {
		futile = srv.tooLate(need, passed, deadline, now, primary)
		return futile
	})
	return futile
}

// tooLate reports whether srv is known not to have replayed need, which
// the primary passed at passed, by deadline: it has not yet, and it is
// paused or lags so far behind that it replays need after deadline.
func (srv *server) tooLate(need LSN, passed, deadline, now time.Time, primary *lagtrack.Tracker) bool {
	if LSN(srv.replay.Load()) >= need {
		return false
	}
	lag, paused, known := srv.behind(now, primary)
	return known && (paused || passed.Add(lag).After(deadline))
}

// each calls f, under the list's lock, for every server seen within
// serverForgotten of now until f returns false.
func (s *servers) each(now time.Time, f func(*server) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, srv := range s.list {
		if srv.lastSeen().Before(now.Add(-serverForgotten)) {
			continue
		}
		if !f(srv) {
			return
		}
	}
}

// serverForgotten is how long a server no connection, check or probe
// reached is still counted behind its endpoint: one that left it (taken
// out of the proxy's rotation) must not keep reads waiting for a look.
const serverForgotten = 5 * time.Second

// lastSeen is when a connection, probe, check or flight last reached srv.
func (srv *server) lastSeen() time.Time {
	seen := time.Unix(0, srv.seen.Load())
	if look := srv.look.Load(); look != nil && look.at.After(seen) {
		return look.at
	}
	return seen
}
