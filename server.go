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
	// look is the latest look at it behind an endpoint (serverlag.go).
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

// learn returns the server for id, registering it, and reports whether
// it is a new incarnation of a server seen before (a restart) and whether
// the node now has several servers behind it.
func (s *servers) learn(id serverID) (srv *server, restarted, several bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
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

// current reports whether srv is the latest incarnation of its server.
func (s *servers) current(srv *server) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, known := range s.list {
		if known == srv {
			return true
		}
	}
	return false
}

// minReplay is the least replay position known over every server: what
// any connection of an endpoint is known to have.
func (s *servers) minReplay() LSN {
	s.mu.Lock()
	defer s.mu.Unlock()
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
	srv, restarted, several := n.servers.learn(id)
	if several && !n.endpoint.Load() {
		n.endpoint.Store(true)
		n.perConn.Store(true)
	}
	if restarted || several || n.pooled.Load() {
		n.replay.Store(uint64(n.knownForAll()))
	}
	return srv
}

// knownForAll is the replay position every connection of n is known to
// reach: the node's own for a single server; the least of its servers'
// for an endpoint; none behind a pooler, which may send each transaction
// to another backend (a read there is proven in its own flight, or on the
// connection just before it).
func (n *node) knownForAll() LSN {
	if n.pooled.Load() {
		return 0
	}
	return n.servers.minReplay()
}

// observeOn records that server srv replayed l. A node with one server
// keeps it as its own position too (srv nil: its identity was not read, a
// test double). Behind a pooler nothing is kept: the next transaction may
// reach another backend.
func (n *node) observeOn(srv *server, l LSN) {
	switch {
	case n.pooled.Load():
	case srv == nil:
		if !n.endpoint.Load() {
			n.observeReplay(l)
		}
	case !n.endpoint.Load():
		atomicMax(&srv.replay, uint64(l))
		if n.servers.current(srv) {
			n.observeReplay(l)
		}
	default:
		atomicMax(&srv.replay, uint64(l))
		srv.sawReplay(l, time.Now())
		n.replay.Store(uint64(n.knownForAll()))
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
