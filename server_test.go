package pgreplica

import (
	"testing"
	"unsafe"
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
