package pgreplica

import (
	"context"
	"database/sql/driver"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica/internal/lagtrack"
)

// TestNamesWithSeveralAddressesGiveANodePerAddress: a name that resolves
// to several addresses is a node per address, each dialled at its own and
// named with it; an IP address, a socket directory, a name with one
// address and a name that does not resolve stay one node as configured.
func TestNamesWithSeveralAddressesGiveANodePerAddress(t *testing.T) {
	looked := map[string]int{}
	lookup := func(_ context.Context, host string) ([]string, error) {
		looked[host]++
		switch host {
		case "localhost":
			return []string{"127.0.0.1", "::1", "127.0.0.1"}, nil
		case "db1":
			return []string{"10.0.0.1"}, nil
		case "pods":
			return []string{"10.0.0.7:5433", "10.0.0.8:5433"}, nil
		}
		return nil, errors.New("no such host")
	}
	cfg := Config{LookupFunc: lookup, Hosts: []Host{
		{Addr: "localhost"}, {Addr: "10.0.0.9"}, {Addr: "/var/run/postgresql"}, {Addr: "db1"}, {Addr: "nope"}, {Addr: "pods", Zone: "b"},
	}}
	pins := map[string]string{}
	c, err := newConnector(cfg, func(_ *Config, h Host, pin string) (driver.Connector, error) {
		pins[pinnedName(h, pin)] = pin
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.followNames(context.Background(), time.Now()); err != nil {
		t.Fatal(err)
	}
	var got []string
	for i, n := range c.nodeList() {
		if n.idx != i {
			t.Errorf("node %s has index %d at %d", n.name, n.idx, i)
		}
		got = append(got, n.name)
		if pins[n.name] != n.pin {
			t.Errorf("node %s dials %q, its connector was made for %q", n.name, n.pin, pins[n.name])
		}
	}
	want := "localhost:5432 (127.0.0.1), localhost:5432 (::1), 10.0.0.9:5432, /var/run/postgresql:5432, db1:5432, nope:5432, " +
		"pods:5432 (10.0.0.7:5433), pods:5432 (10.0.0.8:5433)"
	if strings.Join(got, ", ") != want {
		t.Errorf("nodes\n got  %s\n want %s", strings.Join(got, ", "), want)
	}
	var addrs []string
	for _, n := range c.nodeList() {
		addrs = append(addrs, n.address())
	}
	if got, want := strings.Join(addrs, ", "), "127.0.0.1:5432, [::1]:5432, 10.0.0.9:5432, /var/run/postgresql:5432, db1:5432, nope:5432, 10.0.0.7:5433, 10.0.0.8:5433"; got != want {
		t.Errorf("addresses\n got  %s\n want %s", got, want)
	}
	if looked["10.0.0.9"]+looked["/var/run/postgresql"] != 0 {
		t.Errorf("an address or a socket was looked up: %v", looked)
	}
	if n := c.nodeList()[len(c.nodeList())-1]; n.entry != 5 || n.host.Zone != "b" {
		t.Errorf("a pinned node keeps its host's entry and zone: entry %d zone %q", n.entry, n.host.Zone)
	}
	if got := len(c.topo.Load().nodes); got != len(c.nodeList()) {
		t.Errorf("the published topology has %d nodes, want %d", got, len(c.nodeList()))
	}
}

// TestTheSameServerUnderTwoAddressesIsOneServer: two addresses of a name
// that reached one server incarnation (its address as it sees itself
// differs: 127.0.0.1, ::1) are one server: one primary, no split brain,
// the second shown as the first's alias; when the first is down the
// second serves. Two servers behind one name (another start time) are
// two.
func TestTheSameServerUnderTwoAddressesIsOneServer(t *testing.T) {
	started := time.Now().UnixMicro()
	mk := func(entry int, pin string, r role, id serverID) *node {
		h := Host{Addr: "localhost", Port: 5432}
		n := &node{entry: entry, pin: pin, host: h, name: pinnedName(h, pin)}
		n.status.Store(&nodeStatus{role: r, sysid: 7, timeline: 1, at: time.Now(), id: id})
		return n
	}
	v4 := serverID{sysid: 7, addr: "127.0.0.1", port: 5432, started: started}
	v6 := serverID{sysid: 7, addr: "::1", port: 5432, started: started}
	replica := serverID{sysid: 7, addr: "127.0.0.1", port: 5433, started: started + 9}
	build := func(nodes ...*node) *topology {
		for i, n := range nodes {
			n.idx = i
		}
		return buildTopology(nodes, &lagtrack.Tracker{})
	}

	primary4, primary6 := mk(0, "127.0.0.1", rolePrimary, v4), mk(0, "::1", rolePrimary, v6)
	replica4, replica6 := mk(1, "127.0.0.1", roleReplica, replica), mk(1, "::1", roleReplica, serverID{sysid: 7, addr: "::1", port: 5433, started: started + 9})
	tp := build(primary4, primary6, replica4, replica6)
	if tp.writeErr != nil || tp.primary != 0 {
		t.Fatalf("primary %d, write error %v; want node 0", tp.primary, tp.writeErr)
	}
	for i, want := range []rejection{rejectNotReplica, rejectAlias, rejectNone, rejectAlias} {
		if got := tp.nodes[i].excluded; got != want {
			t.Errorf("node %s excluded %d, want %d", tp.nodes[i].n.name, got, want)
		}
	}
	if why := rejectAlias.explain(&tp.nodes[1], &plan{}, tp); !strings.Contains(why, "localhost:5432 (127.0.0.1)") {
		t.Errorf("an alias says %q, not which node it is an alias of", why)
	}

	primary4.status.Store(&nodeStatus{err: errors.New("connection refused"), role: rolePrimary, sysid: 7, timeline: 1})
	tp = build(primary4, primary6, replica4, replica6)
	if tp.primary != 1 || tp.writeErr != nil {
		t.Errorf("with 127.0.0.1 down the primary is node %d (%v), want the ::1 node", tp.primary, tp.writeErr)
	}

	// Configured as two hosts, they are not aliases: pgreplica does not
	// guess across entries.
	other := mk(1, "::1", rolePrimary, v6)
	primary4.status.Store(&nodeStatus{role: rolePrimary, sysid: 7, timeline: 1, at: time.Now(), id: v4})
	if tp = build(primary4, other); tp.writeErr == nil {
		t.Error("two hosts configured apart that both answer as primary: no split-brain error")
	}
	// Another server behind the same name is not an alias.
	second := mk(0, "::1", rolePrimary, serverID{sysid: 7, addr: "::1", port: 5432, started: started + 1})
	if tp = build(primary4, second); tp.nodes[1].excluded == rejectAlias {
		t.Error("another incarnation behind the same name was taken for an alias")
	}
}
