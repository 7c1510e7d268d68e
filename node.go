package pgreplica

import (
	"context"
	"database/sql/driver"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/pgreplica/pgreplica/internal/probe"
	"github.com/pgreplica/pgreplica/internal/sqlstate"
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

// nodeStatus is one probe's answer, published immutably.
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
	// server is the server the probe reached (server.go).
	server *server
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
	answers answerTime
	// asyncSeen is set once a write on this node may have committed
	// asynchronously: reads that bound what they saw then use the insert
	// LSN.
	asyncSeen atomic.Bool
	// endpoint is set once connections of this address reached more than
	// one server, pooled once a pooler answered for it (server.go).
	endpoint, pooled atomic.Bool

	// servers are the servers behind the address.
	servers servers

	host  Host
	name  string // host:port, for messages (never carries credentials)
	inner driver.Connector

	// status is the last probe's answer, written by the node's monitor
	// loop and read when the topology is rebuilt (never on the hot path,
	// which reads the topology snapshot).
	status atomic.Pointer[nodeStatus]

	// Monitor state.
	//
	// wakeCh asks the node's monitor loop for an early probe.
	wakeCh chan struct{}
	// probes counts finished probes.
	probes atomic.Int64
	// capturedAt is when a capture last read the primary's position on
	// the probe connection (unix ns; see monitor.captureStandsIn).
	capturedAt atomic.Int64
	// probesStarted counts probes sent (a probe may be under way).
	probesStarted atomic.Int64

	// probeLock guards probeConn and what belongs to it (probeConnAt,
	// probeSocks, probeFailed, denied, user): the monitor loop holds it
	// for a probe, a capture while it borrows the connection
	// (probeconn.go). failures belongs to the monitor loop.
	probeLock   connLock
	probeConn   driver.Conn
	probeConnAt time.Time
	// probeSocks are probeConn's sockets, closed when a probe times out.
	probeSocks sockets
	// probeFailed is why a borrowed probe connection was closed when the
	// server did not answer in a probe's time: the next probe reports it
	// rather than connect again first.
	probeFailed error
	failures    int
	// lightProbes counts the light probes since the last full one;
	// fullProbes makes every probe full (ExcludeSyncStandby needs the
	// standbys' sync states as they are).
	lightProbes int
	fullProbes  bool
	// denied and user are what checkPrivileges found when probeConn
	// connected.
	denied probe.Fn
	user   string
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
	select {
	case n.wakeCh <- struct{}{}:
	default:
	}
}

// fullProbeEvery: one probe in so many asks everything (on a fresh
// connection and after a failure, every probe does): a new sync standby
// shows within 2 s while statements run, 8 s while idle.
const fullProbeEvery = 8

// probe runs probe.Query on the node's dedicated monitor connection.
func (n *node) probe(ctx context.Context) *nodeStatus {
	reused := n.probeConn != nil
	st, err := n.probeOnce(ctx)
	if err != nil && n.probeConn != nil {
		n.probeConn.Close()
		n.probeConn = nil
	}
	restarted := false
	if err != nil && reused && sqlstate.ConnLost(err) && ctx.Err() == nil {
		// The connection died since the last probe (a restart): what
		// the host says to a new one is its state now, and the cause
		// worth reporting ("connection refused" rather than lib/pq's
		// "bad connection").
		restarted = true
		st, err = n.probeOnce(ctx)
		if err != nil && n.probeConn != nil {
			n.probeConn.Close()
			n.probeConn = nil
		}
	}
	if err != nil {
		return &nodeStatus{err: err, at: time.Now()}
	}
	// A server back from a restart may have replayed less than it had
	// (crash recovery stops at its last restartpoint's consistent point):
	// what was known of its replay must be forgotten, as after a failed
	// probe.
	st.restarted = st.restarted || restarted
	return st
}

func (n *node) probeOnce(ctx context.Context) (*nodeStatus, error) {
	fresh := n.probeConn == nil
	if err := n.probeFailed; err != nil {
		n.probeFailed = nil
		return nil, err
	}
	if fresh {
		if err := checkSingleAddress(ctx, n.host.Addr, net.DefaultResolver.LookupHost); err != nil {
			return nil, err
		}
		n.probeSocks.reset()
		c, err := n.inner.Connect(context.WithValue(ctx, socketsKey{}, &n.probeSocks))
		if err != nil {
			return nil, err
		}
		n.probeConn, n.probeConnAt = c, time.Now()
		// Grants on functions change rarely: checked once per connection
		// (a failed probe reconnects, and so checks again).
		if n.denied, n.user, err = checkPrivileges(ctx, c); err != nil {
			return nil, err
		}
	}
	if req := n.denied & probe.RequiredFns; req != 0 {
		return nil, deniedError(n.user, req)
	}
	prev := n.status.Load()
	if fresh || n.fullProbes || prev == nil || prev.err != nil || prev.server == nil || n.lightProbes >= fullProbeEvery-1 {
		n.lightProbes = 0
		return n.ask(ctx, fresh, nil)
	}
	st, err := n.ask(ctx, fresh, prev)
	if err == nil && st == nil {
		// The role or the server changed: what was left out may have.
		n.lightProbes = 0
		return n.ask(ctx, fresh, nil)
	}
	n.lightProbes++
	return st, err
}

// ask runs one probe: a full one, or, given the previous answer, a light
// one that takes the system identifier and the standbys from it. A light
// probe that finds another role or another server returns nil: ask again,
// fully.
func (n *node) ask(ctx context.Context, fresh bool, prev *nodeStatus) (*nodeStatus, error) {
	light := prev != nil
	// The round trip is timed without connection setup, which would
	// skew the latency policy's EWMA.
	start := time.Now()
	query := probe.FullSQL
	switch {
	case n.denied != 0:
		query = probe.Query(n.denied, light)
	case light:
		query = probe.LightSQL
	}
	rows, err := queryInner(ctx, n.probeConn, query, nil)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	vals := make([]driver.Value, probe.Columns)
	if err := rows.Next(vals); err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	st := &nodeStatus{role: rolePrimary, sent: start, connSince: n.probeConnAt, denied: n.denied, user: n.user}
	if !fresh {
		// The first query on a new connection also prepares the statement:
		// not a round trip worth comparing.
		st.rtt = time.Since(start)
	}
	// The server ran the query about half a round trip ago: lag samples
	// of different hosts compare better at that moment than at arrival.
	st.at = start.Add(time.Since(start) / 2)
	a, err := probe.Parse(vals)
	if err != nil {
		return nil, err
	}
	if light {
		a.Server.Sysid = prev.sysid // left out of a light probe
	}
	if a.Replica {
		st.role = roleReplica
	}
	st.lsn, st.receive, st.paused, st.timeline = LSN(a.LSN), LSN(a.Receive), a.Paused, a.Timeline
	st.sysid, st.asyncDefault, st.applyDelay = a.Server.Sysid, a.AsyncDefault, a.ApplyDelay
	id := serverIDOf(a.Server)
	if light && (st.role != prev.role || prev.server.id.sameServer(id) && prev.server.id.started != id.started) {
		return nil, nil // a failover or a restart: ask everything
	}
	if prev := n.status.Load(); prev != nil && prev.server != nil && prev.server.id.sameServer(id) && prev.server.id.started != id.started {
		// The server restarted behind a connection that survived it (a
		// pooler's): seen here, without a failed probe.
		st.restarted = true
	}
	if fresh && a.PID != 0 {
		if wire := newWire(n.probeConn).backendPID(); wire != 0 && wire != a.PID {
			n.setPooled() // a pooler answered: see server.go
		}
	}
	st.server = n.noteServer(id)
	st.statsHidden = !a.StatsVisible
	if st.role == roleReplica {
		st.receiver, st.appName = a.Receiver, a.AppName
		st.receiverHidden = a.ReceiverHidden || n.denied&probe.FnWalReceiver != 0
	} else if light {
		st.syncStates = prev.syncStates
	} else {
		st.syncStates = a.SyncStates
	}
	return st, nil
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
