package pgreplica

import (
	"context"
	"database/sql/driver"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgreplica/pgreplica/internal/inner"
	"github.com/pgreplica/pgreplica/internal/lagtrack"
	"github.com/pgreplica/pgreplica/internal/probe"
)

// A configured address is not a server. A Kubernetes Service, an HAProxy
// or cloud reader endpoint, or DNS round robin sends each connection of one
// address to any of several servers; PgBouncer keeps client connections
// open across a restart of the server behind it, and in transaction mode
// sends each transaction to any of its server connections. So what the
// router knows of a replica's replay belongs to the server a connection
// reached, learned per connection: its identity (system identifier, the
// address and port the server sees itself at, and its postmaster's start
// time, which makes it one incarnation), read once when the connection is
// made and with every probe.
//
// A node whose connections all reached one server keeps its facts on the
// node, as before: the common, direct case costs nothing more. A node
// whose connections reached several servers is an endpoint; one behind a
// pooler (the process id the server reported at start-up is not the one
// of the backend that answers) is pooled. On both, a read is proven on the
// connection that runs it, never by what another connection learned.

// serverID identifies one incarnation of a server.
type serverID struct {
	sysid   uint64
	addr    string // inet_server_addr(); "" on a Unix socket
	port    int
	started int64 // pg_postmaster_start_time(), µs since the epoch
}

func (id serverID) sameServer(o serverID) bool {
	return id.sysid == o.sysid && id.addr == o.addr && id.port == o.port
}

func (id serverID) String() string {
	if id.addr == "" {
		return "local socket"
	}
	return id.addr + ":" + strconv.Itoa(id.port)
}

// server is one incarnation of a server behind a node, and the highest
// replay position known for it: replay only moves forward within one.
type server struct {
	id     serverID
	replay atomic.Uint64
	// seen is when a connection or a probe last reached it (unix ns).
	seen atomic.Int64
	// look is the latest look at it behind an endpoint (serverLook).
	look atomic.Pointer[serverLook]
}

// servers are the incarnations a node's connections and probes reached:
// the latest of each server.
type servers struct {
	mu   sync.Mutex
	list []*server
}

// maxServersPerNode bounds what a node remembers of the servers behind
// it; the least recently seen is forgotten first.
const maxServersPerNode = 16

// learnLocked returns the server for id, registering it, and reports
// whether it is a new incarnation of a server seen before (a restart) and
// whether the node now has several servers behind it. s.mu is held.
func (s *servers) learnLocked(id serverID) (srv *server, restarted, several bool) {
	now := time.Now().UnixNano()
	for i, known := range s.list {
		if !known.id.sameServer(id) {
			continue
		}
		if known.id.started == id.started {
			known.seen.Store(now)
			return known, false, len(s.list) > 1
		}
		if id.started < known.id.started {
			// A connection made before the restart answered late: it reached
			// the old incarnation, which is gone.
			old := &server{id: id}
			old.seen.Store(now)
			return old, false, len(s.list) > 1
		}
		srv = &server{id: id}
		srv.seen.Store(now)
		s.list[i] = srv
		return srv, true, len(s.list) > 1
	}
	srv = &server{id: id}
	srv.seen.Store(now)
	if len(s.list) >= maxServersPerNode {
		oldest := 0
		for i, known := range s.list {
			if known.seen.Load() < s.list[oldest].seen.Load() {
				oldest = i
			}
		}
		s.list = append(s.list[:oldest], s.list[oldest+1:]...)
	}
	s.list = append(s.list, srv)
	return srv, false, len(s.list) > 1
}

// currentLocked reports whether srv is the latest incarnation of its
// server. s.mu is held.
func (s *servers) currentLocked(srv *server) bool {
	for _, known := range s.list {
		if known == srv {
			return true
		}
	}
	return false
}

// minReplayLocked is the least replay position known over every server:
// what any connection of an endpoint is known to have. s.mu is held.
func (s *servers) minReplayLocked() LSN {
	if len(s.list) == 0 {
		return 0
	}
	least := ^uint64(0)
	for _, known := range s.list {
		least = min(least, known.replay.Load())
	}
	return LSN(least)
}

// snapshot copies the servers for Nodes.
func (s *servers) snapshot() []ServerStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ServerStatus, len(s.list))
	for i, known := range s.list {
		out[i] = ServerStatus{Addr: known.id.String(), Port: known.id.port,
			StartedAt: time.UnixMicro(known.id.started), Replayed: LSN(known.replay.Load()),
			LastSeen: time.Unix(0, known.seen.Load())}
	}
	return out
}

// learnServer asks the new connection p which server it reached and
// records it on p and its node (one round trip per connection, when it is
// made).
func (n *node) learnServer(ctx context.Context, p *physical) error {
	rows, err := inner.Query(ctx, p.conn, probe.IdentitySQL, nil)
	if err != nil {
		return err
	}
	defer rows.Close()
	vals := make([]driver.Value, probe.IdentityColumns)
	if err := rows.Next(vals); err != nil {
		return fmt.Errorf("pgreplica: reading the server's identity: %w", err)
	}
	id, err := probe.ParseIdentity(vals)
	if err != nil {
		return err
	}
	if wire := p.wire.backendPID(); wire != 0 && wire != id.PID {
		n.setPooled()
	}
	p.srv = n.noteServer(serverIDOf(id.Server))
	p.madeInRecovery = id.InRecovery
	return nil
}

// serverIDOf is the identity of the server a probe or a connection read.
func serverIDOf(s probe.Server) serverID {
	return serverID{sysid: s.Sysid, addr: s.Addr, port: s.Port, started: s.Started}
}

// noteServer registers a server a connection or probe of n reached. A
// second server behind n makes it an endpoint; a new incarnation of its
// only server (a restart behind a pooler, or one that outlived no
// connection) forgets what was known of its replay.
func (n *node) noteServer(id serverID) *server {
	n.servers.mu.Lock()
	defer n.servers.mu.Unlock()
	srv, restarted, several := n.servers.learnLocked(id)
	if several && !n.endpoint.Load() {
		n.endpoint.Store(true)
		n.perConn.Store(true)
	}
	if restarted || several || n.pooled.Load() {
		n.replay.Store(uint64(n.knownForAllLocked()))
	}
	return srv
}

// knownForAllLocked is the replay position every connection of n is
// known to reach: the node's own for a single server; the least of its
// servers' for an endpoint; none behind a pooler, which may send each
// transaction to another backend (a read there is proven in its own
// flight, or on the connection just before it). n.servers.mu is held.
func (n *node) knownForAllLocked() LSN {
	if n.pooled.Load() {
		return 0
	}
	return n.servers.minReplayLocked()
}

// observeOn records that server srv replayed l. A node with one server
// keeps it as its own position too (srv nil: its identity was not read, a
// test double). Behind a pooler nothing is kept: the next transaction may
// reach another backend.
//
// The node's position changes under its servers' lock, as noteServer
// changes the servers: a server that arrived between a look at the
// servers and the change would find the node's position raised past
// what that server is known to have.
func (n *node) observeOn(srv *server, l LSN) {
	if n.pooled.Load() {
		return
	}
	if srv != nil {
		atomicMax(&srv.replay, uint64(l))
	}
	n.servers.mu.Lock()
	defer n.servers.mu.Unlock()
	switch {
	case n.endpoint.Load():
		if srv != nil {
			srv.sawReplay(l, time.Now())
			n.replay.Store(uint64(n.knownForAllLocked()))
		}
	case srv == nil || n.servers.currentLocked(srv):
		n.observeReplay(l)
	}
}

// setPooled records that a pooler answers for n.
func (n *node) setPooled() {
	if !n.pooled.Load() {
		n.pooled.Store(true)
		n.perConn.Store(true)
		n.replay.Store(0)
	}
}

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
// replayed need, which the primary reached at reached, by deadline (see
// tooLate). A server not looked at recently may make it, and so may an
// endpoint with no server known.
func (n *node) serversFutile(need LSN, reached, deadline, now time.Time, primary *lagtrack.Tracker) bool {
	futile := false
	n.servers.each(now, func(srv *server) bool {
		futile = srv.tooLate(need, reached, deadline, now, primary)
		return futile
	})
	return futile
}

// tooLate reports whether srv is known not to have replayed need, which
// the primary reached at reached, by deadline: it has not yet, and it is
// paused or lags so far behind that it replays need after deadline.
func (srv *server) tooLate(need LSN, reached, deadline, now time.Time, primary *lagtrack.Tracker) bool {
	if LSN(srv.replay.Load()) >= need {
		return false
	}
	if look := srv.look.Load(); look != nil && look.replay >= need {
		return false // seen past it (behind a pooler, srv.replay is not kept)
	}
	lag, paused, known := srv.behind(now, primary)
	return known && (paused || reached.Add(lag).After(deadline))
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
