package pgreplica

import (
	"context"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica/internal/lagtrack"
)

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
		{"one is paused, the other lags past the deadline", []serverState{{lag: far}, {lag: 0, paused: true}}, true},
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
