package pgreplica

import (
	"context"
	"testing"
	"time"

	"github.com/DATA-DOG/go-sqlmock"
)

// TestHedgedReadAnswersFromTheOtherReplica: a replica that does not answer
// within the hedge delay gets the read hedged to the other; the hedge's
// answer is the read's, the slow replica is probed at once (and kept from
// reads until then),
// and the counters say so. (sqlmock has no socket to close, so the slow
// attempt runs to its end here; the real cluster tests check the time.)
func TestHedgedReadAnswersFromTheOtherReplica(t *testing.T) {
	first := PickerFunc(func(Candidates) int { return 0 }) // the lowest index: node 1
	mc := newMockCluster(t, 2, func(c *Config) { c.Picker, c.knobs.HedgeDelay = first, 20*time.Millisecond })
	mc.refresh()
	mc.mocks[1].ExpectQuery("SELECT v FROM t").WillDelayFor(300 * time.Millisecond).
		WillReturnRows(sqlmock.NewRows([]string{"v"}).AddRow(1))
	mc.mocks[2].ExpectQuery("SELECT v FROM t").WillReturnRows(sqlmock.NewRows([]string{"v"}).AddRow(2))

	probes := mc.c.nodeList()[1].probes.Load()
	var v int
	if err := mc.db.QueryRowContext(context.Background(), "SELECT v FROM t").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if v != 2 {
		t.Fatalf("the read answered %d, want the hedge's answer 2", v)
	}
	s := mc.c.Stats()
	if s.Hedges != 1 || s.HedgeWins != 1 || s.HedgesDenied != 0 {
		t.Errorf("hedges %d, wins %d, denied %d; want 1, 1, 0", s.Hedges, s.HedgeWins, s.HedgesDenied)
	}
	// Suspect until its next probe, which the hedge asked for at once.
	for deadline := time.Now().Add(5 * time.Second); mc.c.nodeList()[1].probes.Load() == probes; {
		if time.Now().After(deadline) {
			t.Fatal("the replica that did not answer in time was not probed")
		}
		select {
		case <-mc.c.mon.changedCh():
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestHedgeNotSentWhenTheReplicaAnswers: an answer within the delay sends
// nothing else; with hedging disabled a slow answer is waited for.
func TestHedgeNotSentWhenTheReplicaAnswers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delay time.Duration // the replica's answer
		hedge time.Duration // Config.HedgeDelay
	}{
		{"fast answer", 0, 200 * time.Millisecond},
		{"hedging disabled", 60 * time.Millisecond, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first := PickerFunc(func(Candidates) int { return 0 })
			mc := newMockCluster(t, 2, func(c *Config) { c.Picker, c.knobs.HedgeDelay = first, tc.hedge })
			mc.refresh()
			mc.mocks[1].ExpectQuery("SELECT v FROM t").WillDelayFor(tc.delay).
				WillReturnRows(sqlmock.NewRows([]string{"v"}).AddRow(1))
			var v int
			if err := mc.db.QueryRow("SELECT v FROM t").Scan(&v); err != nil {
				t.Fatal(err)
			}
			if s := mc.c.Stats(); v != 1 || s.Hedges != 0 {
				t.Errorf("answer %d with %d hedges; want 1 and none", v, s.Hedges)
			}
		})
	}
}

// TestHedgeTarget: a hedge goes to a replica its read's plan accepts,
// never the first attempt's, in another zone when the first held the only
// one in zone; after a session read on its last replica it must also
// have what that read saw, and with no known bound on that read there is
// no hedge.
func TestHedgeTarget(t *testing.T) {
	top := snapshot(
		spec{role: rolePrimary},
		spec{role: roleReplica, replay: 1000, zone: "a"},
		spec{role: roleReplica, replay: 500, zone: "b", lag: time.Second},
		spec{role: roleReplica, replay: 950, zone: "b"},
	)
	// The first candidate, so that a wrong candidate set shows.
	c := &router{picker: PickerFunc(func(Candidates) int { return 0 })}
	first := &physical{node: top.nodes[1].n}
	target := func(pl plan) *node {
		pl.topo, pl.read = top, true
		s := &hedgeSlot{first: first, c: c, plan: pl}
		return s.pick()
	}
	for _, tc := range []struct {
		name string
		pl   plan
		want int // -1: no hedge
		// perConn: this node is an endpoint (its connections may reach
		// several servers).
		perConn int
	}{
		{"any replica but the first", plan{need: 900}, 3, 0},
		{"the first held the only one in zone", plan{need: 900, zone: "a"}, 3, 0},
		{"none has the position", plan{need: 990}, -1, 0},
		{"affinity with a known bound on the last read", plan{need: 400, prefer: top.nodes[1].n, lastReadBound: 900, lastReadBoundKnown: true}, 3, 0},
		{"affinity with no known bound", plan{need: 400, prefer: top.nodes[1].n}, -1, 0},
		// Every filter of the plan applies, not a copy of some of them.
		{"the plan's lag bound", plan{maxLag: 100 * time.Millisecond}, 3, 0},
		{"an endpoint, for a position", plan{need: 900}, -1, 3},
		{"an endpoint, for no position", plan{}, 2, 2},
	} {
		if tc.perConn > 0 {
			top.nodes[tc.perConn].n.perConn.Store(true)
		}
		got := target(tc.pl)
		if tc.perConn > 0 {
			top.nodes[tc.perConn].n.perConn.Store(false)
		}
		switch {
		case tc.want < 0 && got != nil:
			t.Errorf("%s: hedge to %s, want none", tc.name, got.name)
		case tc.want >= 0 && got == nil:
			t.Errorf("%s: no hedge, want node %d", tc.name, tc.want)
		case tc.want >= 0 && got.idx != tc.want:
			t.Errorf("%s: hedge to node %d, want node %d", tc.name, got.idx, tc.want)
		}
	}
}

// TestSlotAnewWhileBusy: a connection's next read gets a hedge slot of its
// own while the last hedge from it still runs or cleans up, so that it is
// hedged too; otherwise it keeps the connection's slot.
func TestSlotAnewWhileBusy(t *testing.T) {
	p := &physical{}
	w := &hedgeWatch{}
	s := p.slot(w)
	if again := p.slot(w); again != s {
		t.Fatal("an idle slot was not reused")
	}
	s.busy.Store(true) // a launch runs
	fresh := p.slot(w)
	if fresh == s || fresh.busy.Load() || p.hedge.Load() != fresh {
		t.Fatal("a read on a connection whose last hedge still runs did not get a slot of its own")
	}
	if !s.busy.Load() {
		t.Error("the running launch's slot was changed")
	}
}
