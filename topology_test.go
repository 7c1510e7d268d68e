package pgreplica

import (
	"errors"
	"testing"
)

// TestPrimariesOfOneServer: two addresses whose probes reached the same
// primary (HAProxy's writer port and, for a moment after a promotion, its
// reader port) are one primary, the address that is not an endpoint
// preferred; two servers on one timeline are split brain.
func TestPrimariesOfOneServer(t *testing.T) {
	view := func(name string, id serverID, endpoint bool) nodeView {
		n := &node{name: name}
		n.endpoint.Store(endpoint)
		return nodeView{n: n, status: nodeStatus{role: rolePrimary, timeline: 3, sysid: id.sysid, id: id}}
	}
	primary := serverID{sysid: 7, addr: "10.0.0.2", port: 5432, started: 1}
	other := serverID{sysid: 7, addr: "10.0.0.3", port: 5432, started: 1}
	for _, tc := range []struct {
		name  string
		nodes []nodeView
		want  int // -1: split brain
	}{
		{"one server, the first an endpoint", []nodeView{view("writer", primary, true), view("reader", primary, false)}, 1},
		{"one server, both endpoints", []nodeView{view("writer", primary, true), view("reader", primary, true)}, 0},
		{"two servers", []nodeView{view("a", primary, false), view("b", other, false)}, -1},
		{"another incarnation", []nodeView{view("a", primary, false), view("b", serverID{sysid: 7, addr: "10.0.0.2", port: 5432, started: 2}, false)}, -1},
		{"identity unknown", []nodeView{view("a", serverID{}, false), view("b", serverID{}, false)}, -1},
	} {
		got, err := highestTimeline(tc.nodes, []int{0, 1})
		if tc.want < 0 {
			if !errors.Is(err, ErrSplitBrain) {
				t.Errorf("%s: got primary %d, %v; want split brain", tc.name, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: got primary %d, %v; want %d", tc.name, got, err, tc.want)
		}
	}
}
