package pgreplica

import (
	"context"
	"testing"
	"time"
	"unsafe"

	"github.com/pgreplica/pgreplica/internal/lagtrack"
	"github.com/pgreplica/pgreplica/internal/monoclock"
)

// TestServersBehindANode: facts about a server belong to the server a
// connection reached. One server keeps them on its node, as before; a
// restart (a new start time) forgets them; a second server makes the node
// an endpoint, known to have only what every server behind it has; a
// pooler keeps nothing, since its next transaction may reach another
// backend.
func TestServersBehindANode(t *testing.T) {
	n := &node{}
	a := serverID{sysid: 7, addr: "10.0.0.1", port: 5432, started: 100}
	s1 := n.noteServer(a)
	n.observeOn(s1, 0x500)
	if got := LSN(n.replay.Load()); got != 0x500 || n.perConn.Load() {
		t.Fatalf("one server: node replay %s, per connection %v; want 0/500, false", got, n.perConn.Load())
	}
	if n.noteServer(a) != s1 {
		t.Fatal("the same incarnation learned twice is two servers")
	}
	p := &physical{node: n, srv: s1}
	if p.knownReplay() != 0x500 {
		t.Fatalf("connection knows %s, want 0/500", p.knownReplay())
	}

	restarted := a
	restarted.started = 200
	s2 := n.noteServer(restarted)
	if s2 == s1 || n.replay.Load() != 0 || n.endpoint.Load() {
		t.Fatalf("a restart: new incarnation %v, node replay %s, endpoint %v; want new, 0, false", s2 != s1, LSN(n.replay.Load()), n.endpoint.Load())
	}
	n.observeOn(s1, 0x900) // an answer from before the restart
	if n.replay.Load() != 0 {
		t.Fatalf("the old incarnation's position %s stands for the new one", LSN(n.replay.Load()))
	}
	if late := n.noteServer(a); late == s2 {
		t.Fatal("a connection of the old incarnation was given the new one")
	}

	n.observeOn(s2, 0x600)
	b := serverID{sysid: 7, addr: "10.0.0.2", port: 5432, started: 100}
	s3 := n.noteServer(b)
	if !n.endpoint.Load() || !n.perConn.Load() {
		t.Fatal("two servers behind one address: not an endpoint")
	}
	if got := LSN(n.replay.Load()); got != 0 {
		t.Fatalf("endpoint replay %s with a server of unknown position, want 0", got)
	}
	n.observeOn(s3, 0x700)
	if got := LSN(n.replay.Load()); got != 0x600 {
		t.Fatalf("endpoint replay %s, want the least of its servers' 0/600", got)
	}
	if (&physical{node: n, srv: s3}).knownReplay() != 0x700 {
		t.Fatal("a connection of an endpoint does not know its own server's position")
	}
	if got := len(n.servers.snapshot()); got != 2 {
		t.Fatalf("%d servers listed, want 2", got)
	}

	n.setPooled()
	n.observeOn(s3, 0x800)
	if n.noteServer(b); n.replay.Load() != 0 || (&physical{node: n, srv: s3}).knownReplay() != 0 {
		t.Fatal("behind a pooler a position is trusted for a connection")
	}
}

// TestAffinityNeedsTheSameServer: a session read stays on its last read's
// replica without a bound only on a connection to the same server
// incarnation, older than that read, and never behind a pooler.
func TestAffinityNeedsTheSameServer(t *testing.T) {
	n := &node{}
	s1 := n.noteServer(serverID{sysid: 7, addr: "10.0.0.1", port: 5432, started: 100})
	s2 := n.noteServer(serverID{sysid: 7, addr: "10.0.0.2", port: 5432, started: 100})
	pl := &plan{prefer: n, preferServer: s1, preferSince: 50}
	for _, c := range []struct {
		name string
		p    *physical
		want bool
	}{
		{"same server, older", &physical{node: n, srv: s1, created: 10}, true},
		{"same server, newer", &physical{node: n, srv: s1, created: 60}, false},
		{"other server behind the endpoint", &physical{node: n, srv: s2, created: 10}, false},
	} {
		if got := c.p.affine(pl.preferServer, pl.preferSince); got != c.want {
			t.Errorf("%s: affine %v, want %v", c.name, got, c.want)
		}
	}
	n.setPooled()
	if (&physical{node: n, srv: s1, created: 10}).affine(pl.preferServer, pl.preferSince) {
		t.Error("affinity behind a pooler")
	}
}

// TestNodeHotLine: what every replica borrow reads of its node (the known
// replay position, suspicion, whether reads are proven per connection)
// shares the node's first cache line.
func TestNodeHotLine(t *testing.T) {
	var n node
	for name, off := range map[string]uintptr{"replay": unsafe.Offsetof(n.replay), "suspect": unsafe.Offsetof(n.suspect),
		"perConn": unsafe.Offsetof(n.perConn), "inflight": unsafe.Offsetof(n.inflight)} {
		if off >= 64 {
			t.Errorf("node.%s at offset %d, past the first cache line", name, off)
		}
	}
}

// serverState is how a test sets up one server behind an endpoint.
type serverState struct {
	lag      time.Duration // behind the primary at its last look (-1: never looked at)
	lookAge  time.Duration // how long ago that look was
	paused   bool          // a probe found its replay paused
	replayed bool          // known to have the read's position
	gone     bool          // nothing reached it for longer than serverForgotten
}

// endpointOf makes replica node v an endpoint with one server per state,
// against a primary that passed position 1000 two seconds before now and
// 2000 at now (so a server lagging L sits at 2000 − L/2s × 1000).
func endpointOf(t *testing.T, primary *lagtrack.Tracker, v *nodeView, now time.Time, states ...serverState) {
	t.Helper()
	primary.Add(now.Add(-2*time.Second), 1000)
	primary.Add(now, 2000)
	for i, s := range states {
		srv := v.n.noteServer(serverID{sysid: 1, addr: "10.0.0.1", port: 5432 + i, started: 1})
		if s.gone {
			srv.seen.Store(now.Add(-2 * serverForgotten).UnixNano())
			continue
		}
		if s.replayed {
			srv.replay.Store(2000)
		}
		if s.lag >= 0 {
			at := now.Add(-s.lookAge)
			replay := LSN(2000 - int64(s.lag)*1000/int64(2*time.Second))
			if s.paused {
				srv.sawProbe(&nodeStatus{lsn: replay, at: at, paused: true})
			} else {
				srv.sawReplay(replay, at)
			}
		}
	}
	if !v.n.endpoint.Load() {
		t.Fatal("two servers did not make the node an endpoint")
	}
}

// TestServersFutile: behind an endpoint, a wait is futile only when every
// server recently looked at is known to replay the read's position after
// its deadline (a lagging probe's server once made every read wait out
// its budget there: 0.11× the throughput through PgBouncer per node).
func TestServersFutile(t *testing.T) {
	const far, near = 300 * time.Millisecond, 10 * time.Millisecond
	for _, tc := range []struct {
		name    string
		servers []serverState
		futile  bool
	}{
		{"both lag past the deadline", []serverState{{lag: far}, {lag: far}}, true},
		{"one lags within the budget", []serverState{{lag: far}, {lag: near}}, false},
		{"one was never looked at", []serverState{{lag: far}, {lag: -1}}, false},
		{"one is paused behind the position, the other lags past the deadline", []serverState{{lag: far}, {lag: near, paused: true}}, true},
		{"one is paused past the position", []serverState{{lag: far}, {lag: 0, paused: true}}, false},
		{"the looks are too old to trust", []serverState{{lag: far, lookAge: 2 * serverLookFresh}, {lag: far}}, false},
		{"one has replayed the position", []serverState{{lag: far}, {lag: far, replayed: true}}, false},
		{"one left the endpoint long ago", []serverState{{lag: far}, {gone: true}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Now()
			c := &router{}
			top := snapshot(spec{role: rolePrimary}, spec{role: roleReplica, replay: 1000})
			endpointOf(t, &c.primaryLSNs, &top.nodes[1], now, tc.servers...)
			pl := plan{topo: top, need: 2000, deadline: now.Add(150 * time.Millisecond)}
			if got, _ := c.futile(context.Background(), &pl); got != tc.futile {
				t.Errorf("futile = %v, want %v", got, tc.futile)
			}
		})
	}
}

// TestServersLate: behind an endpoint, a read of a write of a moment ago
// goes to the primary at once only when every server recently looked at
// is known to replay it later than the primary would answer.
func TestServersLate(t *testing.T) {
	const far = 300 * time.Millisecond
	for _, tc := range []struct {
		name    string
		servers []serverState
		late    bool
	}{
		{"both lag", []serverState{{lag: far}, {lag: far}}, true},
		{"one is caught up", []serverState{{lag: far}, {lag: 0}}, false},
		{"one was never looked at", []serverState{{lag: far}, {lag: -1}}, false},
		{"one is paused", []serverState{{lag: far}, {lag: 0, paused: true}}, true},
		{"the looks are too old to trust", []serverState{{lag: far, lookAge: 2 * serverLookFresh}, {lag: far, lookAge: 2 * serverLookFresh}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Now()
			var primary lagtrack.Tracker
			top := snapshot(spec{role: rolePrimary}, spec{role: roleReplica, replay: 1000})
			top.nodes[0].n.observeRTT(200 * time.Microsecond)
			endpointOf(t, &primary, &top.nodes[1], now, tc.servers...)
			pl := plan{topo: top, read: true, pendingWriteAt: now.Add(-time.Millisecond)}
			if got := pl.replicasLate(true, now, &primary); got != tc.late {
				t.Errorf("replicasLate = %v, want %v", got, tc.late)
			}
		})
	}
}

// TestAffineReadNeedsItsOwnServersPosition: a session read that stays on
// its last read's server behind an endpoint is served there without a
// check only when that server is known to have the read's position: the
// node's own position is the least of its servers', and a look at them
// that a new server overtook may have left it higher.
func TestAffineReadNeedsItsOwnServersPosition(t *testing.T) {
	mc := newMockCluster(t, 1, nil)
	mc.refresh()
	c := mc.c
	topo := c.topo.Load()
	n := topo.nodes[1].n
	pl := &plan{topo: topo, prefer: n, preferSince: monoclock.Now() + monoclock.Time(time.Hour), need: 0x200}
	pl.fresh.add(1)
	n.replay.Store(0x300) // what selection saw
	if l, ok := c.leaseAffine(context.Background(), pl, true); !ok {
		t.Fatal("one server known to have the position: not served where the session last read")
	} else {
		l.release(nil)
	}
	n.noteServer(serverID{sysid: mc.sysid, addr: "10.0.0.1", port: 5432, started: 1})
	n.noteServer(serverID{sysid: mc.sysid, addr: "10.0.0.2", port: 5432, started: 1})
	n.replay.Store(0x300) // raised past what the connection's server is known to have
	if l, ok := c.leaseAffine(context.Background(), pl, true); ok {
		l.release(nil)
		t.Fatal("behind an endpoint, served on a connection whose server is not known to have the position")
	}
}
