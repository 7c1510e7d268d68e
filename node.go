package pgreplica

import (
	"database/sql/driver"
	"sync/atomic"
	"time"

	"github.com/pgreplica/pgreplica/internal/hedging"
	"github.com/pgreplica/pgreplica/internal/probe"
	"github.com/pgreplica/pgreplica/internal/prober"
)

// role is what a node answered to pg_is_in_recovery().
type role uint8

const (
	roleUnknown role = iota
	rolePrimary
	roleReplica
)

// Roles as NodeStatus.Role reports them.
const (
	RolePrimary = "primary"
	RoleReplica = "replica"
	RoleUnknown = "unknown" // never answered
)

func (r role) String() string {
	switch r {
	case rolePrimary:
		return RolePrimary
	case roleReplica:
		return RoleReplica
	}
	return RoleUnknown
}

// nodeStatus is a node's copy of its prober's answer (prober.Status) in
// the router's types, with what the node adds to it (replayRate, server);
// published immutably.
type nodeStatus struct {
	role     role
	err      error // last probe error; nil when healthy
	lsn      LSN   // primary: pg_current_wal_flush_lsn(); replica: replay LSN
	receive  LSN   // replica: pg_last_wal_receive_lsn()
	paused   bool  // replica: replay paused
	timeline uint32
	sysid    uint64
	// receiver is a replica's WAL receiver state ("streaming", or "" when
	// it has none); appName is the name the primary knows it by.
	receiver, appName string
	// statsHidden: the role lacks pg_read_all_stats, so PostgreSQL hides
	// the WAL receiver's state, conninfo and timeline and the standbys'
	// sync_state (privilege.go). receiverHidden: a WAL receiver runs but
	// its state is hidden. denied is what the role may not use at all;
	// user is the role's name.
	statsHidden, receiverHidden bool
	denied                      probe.Fn
	user                        string
	// syncStates maps a primary's standbys (application_name) to their
	// sync_state (async, sync, potential, quorum).
	syncStates map[string]string
	// asyncDefault: synchronous_commit is off for our role and database.
	asyncDefault bool
	// applyDelay is a replica's recovery_min_apply_delay; replayRate its
	// replay speed since the previous probe in bytes/s (0: unknown or
	// idle). Together they predict when it reaches a position.
	applyDelay time.Duration
	replayRate float64
	at         time.Time     // when the probe answered
	rtt        time.Duration // probe round trip
	// sent is when the probe was sent, on a connection open since
	// connSince: a position it read is at or past anything a statement
	// on the same server finished before sent could have seen, when that
	// statement started after connSince (no restart in between).
	sent, connSince time.Time
	// restarted: the probe connection died since the last probe and a
	// new one answered, or the server's start time changed; the server
	// may have come back behind.
	restarted bool
	// id is the server the probe reached, server its record on the node
	// (server.go); pooled: a pooler answered on the probe connection.
	id     serverID
	server *server
	pooled bool
}

// nodeStatusOf is a node's copy of a prober's answer (server and
// replayRate are the node's to fill).
func nodeStatusOf(a *prober.Status) nodeStatus {
	st := nodeStatus{err: a.Err, lsn: LSN(a.LSN), receive: LSN(a.Receive), paused: a.Paused, timeline: a.Timeline, sysid: a.Sysid,
		receiver: a.Receiver, appName: a.AppName, statsHidden: a.StatsHidden, receiverHidden: a.ReceiverHidden,
		denied: a.Denied, user: a.User, syncStates: a.SyncStates, asyncDefault: a.AsyncDefault, applyDelay: a.ApplyDelay,
		at: a.At, rtt: a.RTT, sent: a.Sent, connSince: a.ConnSince, restarted: a.Restarted, id: serverIDOf(a.Server), pooled: a.Pooled}
	switch a.Role {
	case prober.Primary:
		st.role = rolePrimary
	case prober.Replica:
		st.role = roleReplica
	}
	return st
}

func (s *nodeStatus) healthy() bool { return s != nil && s.err == nil && s.role != roleUnknown }

// node is one host of the cluster: its pool and what the monitor knows.
type node struct {
	// Hot-path state, read live by selection and borrows; first, in one
	// cache line.
	idx  int
	pool *hostPool
	// replay is the highest replay LSN known for this replica, from the
	// monitor or from a check on the hot path. Replay only moves forward on
	// a timeline, so a value here proves the replica has at least this much.
	replay atomic.Uint64
	// suspect is set by the hot path when a query failed on a connection
	// error; the node gets no reads until the monitor probes it again.
	suspect atomic.Bool
	// perConn is set once reads here must be proven per connection: the
	// address is an endpoint or a pooler answers for it (server.go). In
	// the same line as replay: every replica borrow reads it.
	perConn atomic.Bool
	// inflight counts statements running on this node (latency policy).
	inflight atomic.Int64
	// rtt is the EWMA of probe round trips, in nanoseconds (monitor).
	rtt atomic.Int64
	// answers estimates how long reads here take to answer (hedging).
	answers hedging.AnswerTime
	// asyncSeen is set once a write on this node may have committed
	// asynchronously: reads that bound what they saw then use the insert
	// LSN.
	asyncSeen atomic.Bool
	// endpoint is set once connections of this address reached more than
	// one server, pooled once a pooler answered for it (server.go).
	endpoint, pooled atomic.Bool

	// servers are the servers behind the address.
	servers servers

	host Host
	// entry is host's index in Config.Hosts; pin is the address of
	// host's name that this node dials, "" when it dials host as
	// configured (resolve.go).
	entry int
	pin   string
	// retired is set once the name stopped giving pin (resolve.go): the
	// node gets no statements, and its connections close when idle.
	retired atomic.Bool
	name    string // host:port (and pin), for messages (never carries credentials)
	inner   driver.Connector

	// status is the last probe's answer, written by the node's monitor
	// loop and read when the topology is rebuilt (never on the hot path,
	// which reads the topology snapshot).
	status atomic.Pointer[nodeStatus]

	// prober probes the address for the whole process
	// (internal/prober); probes counts its answers this node took,
	// applied the last one's number (prober.Status.Seq).
	prober  *prober.Prober
	probes  atomic.Int64
	applied atomic.Uint64

	// flights is what reads with their check in flight learned of how
	// soon the replica shows a write of this process (flightages.go).
	flights flightAges
}

// observeReplay raises the cached replay LSN (never lowers it).
func (n *node) observeReplay(l LSN) { atomicMax(&n.replay, uint64(l)) }

// markSuspect records a hot-path failure and asks for a probe now. The
// connection may have died with a restart, after which the server may
// have replayed less than it had: what was known of its replay is
// forgotten until the monitor reads it again.
func (n *node) markSuspect() {
	n.suspect.Store(true)
	n.replay.Store(0)
	n.poke()
}

// poke asks for an early probe without blocking.
func (n *node) poke() {
	if n.prober != nil {
		n.prober.Poke()
	}
}

// rttEWMA returns the smoothed probe round trip.
func (n *node) rttEWMA() time.Duration { return time.Duration(n.rtt.Load()) }

// observeRTT folds a probe round trip into the EWMA (alpha 0.2, as MongoDB).
func (n *node) observeRTT(d time.Duration) {
	old := n.rtt.Load()
	if old == 0 {
		n.rtt.Store(int64(d))
		return
	}
	n.rtt.Store(int64(0.8*float64(old) + 0.2*float64(d)))
}
