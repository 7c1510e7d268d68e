package pgreplica

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// spec is one host of a test snapshot, in plain values.
type spec struct {
	role     role
	zone     string
	down     bool
	sysid    uint64 // 0: the cluster's (7)
	timeline uint32 // 0: the cluster's (1)
	lag      time.Duration
	lagBytes uint64
	replay   LSN
	suspect  bool
	rtt      time.Duration
	inflight int64
	sync     string // sync_state the primary reports for it
}

// snapshot builds a topology from specs the way the monitor does, without
// probes: the static filters run as in buildTopology.
func snapshot(specs ...spec) *topology {
	t := &topology{primary: -1, sysid: 7, timeline: 1, nodes: make([]nodeView, len(specs))}
	syncStates := map[string]string{}
	for i, s := range specs {
		n := &node{idx: i, name: fmt.Sprintf("h%d:5432", i), host: Host{Zone: s.zone}}
		n.replay.Store(uint64(s.replay))
		n.suspect.Store(s.suspect)
		n.inflight.Store(s.inflight)
		st := nodeStatus{role: s.role, sysid: 7, timeline: 1, appName: fmt.Sprintf("h%d", i)}
		if s.sysid != 0 {
			st.sysid = s.sysid
		}
		if s.timeline != 0 {
			st.timeline = s.timeline
		}
		if s.down {
			st.err = errTestDown
		}
		if s.sync != "" {
			syncStates[st.appName] = s.sync
		}
		if s.role == rolePrimary && t.primary < 0 {
			t.primary = i
		}
		t.nodes[i] = nodeView{n: n, zone: n.host.Zone, status: st, probed: true, lag: s.lag, lagBytes: s.lagBytes, rtt: s.rtt}
	}
	if p := t.primaryNode(); p != nil {
		p.status.syncStates = syncStates
	}
	for i := range t.nodes {
		t.nodes[i].excluded = t.exclusion(i)
		if t.nodes[i].excluded == rejectNone {
			t.eligible.add(i)
		}
	}
	return t
}

var errTestDown = fmt.Errorf("connection refused")

func members(s nodeSet) []int {
	var out []int
	for ; s != 0; s &= s - 1 {
		out = append(out, s.nth(0))
	}
	return out
}

// TestSelectionFilters runs the filter chain over snapshots, like the
// MongoDB server-selection spec tests: topology and read in, the replicas
// that may serve it out, and why each other one may not.
func TestSelectionFilters(t *testing.T) {
	primary := spec{role: rolePrimary}
	replica := spec{role: roleReplica, replay: 500}
	with := func(s spec, f func(*spec)) spec { f(&s); return s }
	cases := []struct {
		name  string
		nodes []spec
		pl    plan
		want  []int
		why   map[int]rejection
	}{
		{name: "every healthy replica", nodes: []spec{primary, replica, replica}, want: []int{1, 2},
			why: map[int]rejection{0: rejectNotReplica}},
		{name: "unreachable", nodes: []spec{primary, with(replica, func(s *spec) { s.down = true }), replica}, want: []int{2},
			why: map[int]rejection{1: rejectUnreachable}},
		{name: "another cluster", nodes: []spec{primary, with(replica, func(s *spec) { s.sysid = 9 }), replica}, want: []int{2},
			why: map[int]rejection{1: rejectOtherCluster}},
		{name: "old timeline", nodes: []spec{with(primary, func(s *spec) { s.timeline = 2 }), replica, with(replica, func(s *spec) { s.timeline = 2 })}, want: []int{2},
			why: map[int]rejection{1: rejectOldTimeline}},
		{name: "newer timeline than the primary's", nodes: []spec{primary, with(replica, func(s *spec) { s.timeline = 2 }), replica}, want: []int{2},
			why: map[int]rejection{1: rejectNewTimeline}},
		{name: "superseded primary", nodes: []spec{with(primary, func(s *spec) { s.timeline = 2 }), primary, with(replica, func(s *spec) { s.timeline = 2 })}, want: []int{2},
			why: map[int]rejection{1: rejectSuperseded}},
		{name: "sync standby allowed", nodes: []spec{primary, with(replica, func(s *spec) { s.sync = "sync" })}, want: []int{1}},
		{name: "suspect", nodes: []spec{primary, with(replica, func(s *spec) { s.suspect = true }), replica}, want: []int{2},
			why: map[int]rejection{1: rejectSuspect}},
		{name: "tried", nodes: []spec{primary, replica, replica}, pl: plan{tried: 1 << 2}, want: []int{1},
			why: map[int]rejection{2: rejectTried}},
		{name: "lag time bound", nodes: []spec{primary, with(replica, func(s *spec) { s.lag = 2 * time.Second }), with(replica, func(s *spec) { s.lag = time.Second })},
			pl: plan{maxLag: time.Second}, want: []int{2}, why: map[int]rejection{1: rejectLagTime}},
		{name: "staleness bound", nodes: []spec{primary, with(replica, func(s *spec) { s.lag = 300 * time.Millisecond }), replica},
			pl: plan{kind: readStaleness, maxLag: 200 * time.Millisecond}, want: []int{2}, why: map[int]rejection{1: rejectStale}},
		{name: "needed position", nodes: []spec{primary, with(replica, func(s *spec) { s.replay = 400 }), with(replica, func(s *spec) { s.replay = 600 })},
			pl: plan{need: 500}, want: []int{2}, why: map[int]rejection{1: rejectBehind}},
		{name: "position exactly reached", nodes: []spec{primary, replica}, pl: plan{need: 500}, want: []int{1}},
		{name: "zone preferred", nodes: []spec{primary, with(replica, func(s *spec) { s.zone = "a" }), with(replica, func(s *spec) { s.zone = "b" }), with(replica, func(s *spec) { s.zone = "b" })},
			pl: plan{zone: "b"}, want: []int{2, 3}},
		{name: "zone has none fresh: any zone", nodes: []spec{primary, with(replica, func(s *spec) { s.zone = "a" }), with(replica, func(s *spec) { s.zone = "b"; s.replay = 10 })},
			pl: plan{zone: "b", need: 500}, want: []int{1}},
		{name: "no primary: replicas still serve", nodes: []spec{with(primary, func(s *spec) { s.down = true; s.role = roleUnknown }), replica}, want: []int{1}},
		{name: "nothing eligible", nodes: []spec{primary, with(replica, func(s *spec) { s.down = true })}, want: nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			top := snapshot(tc.nodes...)
			pl := tc.pl
			pl.topo = top
			if got := members(pl.replicas(true)); !slices.Equal(got, tc.want) {
				t.Errorf("eligible %v, want %v", got, tc.want)
			}
			for i, want := range tc.why {
				if got := pl.reject(&top.nodes[i], true); got != want {
					t.Errorf("node %d rejected by %d (%q), want %d (%q)", i, got, got.explain(&top.nodes[i], &pl, top), want, want.explain(&top.nodes[i], &pl, top))
				}
				if want.explain(&top.nodes[i], &pl, top) == "" {
					t.Errorf("rejection %d has no explanation", want)
				}
			}
		})
	}
}

func TestPickers(t *testing.T) {
	top := snapshot(
		spec{role: rolePrimary},
		spec{role: roleReplica, replay: 100, lag: 30 * time.Millisecond, rtt: time.Millisecond},
		spec{role: roleReplica, replay: 300, lag: 10 * time.Millisecond, rtt: 2 * time.Millisecond},
		spec{role: roleReplica, replay: 200, lag: 10 * time.Millisecond, rtt: 50 * time.Millisecond},
	)
	pl := plan{topo: top}
	set := pl.replicas(true)

	// Read one at a time, the replicas take turns of turnReads reads.
	seen := map[int]int{}
	var order []int
	rr := newPicker(PolicyRoundRobin)
	for range 3 * turnReads {
		k := pick(rr, top, set)
		seen[k]++
		if len(order) == 0 || order[len(order)-1] != k {
			order = append(order, k)
		}
	}
	if len(seen) != 3 || seen[1] != turnReads || seen[2] != turnReads || seen[3] != turnReads {
		t.Errorf("round robin spread %v, want %d each", seen, turnReads)
	}
	if len(order) != 4 { // the first turn is one read short, its last read begins the next round
		t.Errorf("round robin took the replicas in the order %v, want turns", order)
	}
	// With every replica busy, reads go round read by read.
	for i := 1; i <= 3; i++ {
		top.nodes[i].n.inflight.Add(1)
	}
	seen = map[int]int{}
	for range 30 {
		seen[pick(rr, top, set)]++
	}
	if seen[1] != 10 || seen[2] != 10 || seen[3] != 10 {
		t.Errorf("round robin over busy replicas spread %v, want 10 each", seen)
	}
	for i := 1; i <= 3; i++ {
		top.nodes[i].n.inflight.Add(-1)
	}
	if got := pick(newPicker(PolicyLeastLag), top, set); got != 2 {
		t.Errorf("least lag picked %d, want 2 (least lag, then highest replay)", got)
	}
	for range 50 {
		if got := pick(newPicker(PolicyLatency), top, set); got == 3 {
			t.Fatal("latency policy picked a replica 48 ms slower than the fastest")
		}
		if got := pick(newPicker(PolicyRandom), top, set); !set.has(got) {
			t.Fatalf("random picked %d outside the candidates", got)
		}
	}
	// A user's own picker sees the candidates and chooses.
	byAddr := PickerFunc(func(c Candidates) int {
		for i := range c.Len() {
			if c.At(i).Addr == "h3:5432" {
				return i
			}
		}
		return -1
	})
	if got := pick(byAddr, top, set); got != 3 {
		t.Errorf("custom picker got %d, want 3", got)
	}
	if got := pick(PickerFunc(func(Candidates) int { return 99 }), top, set); got != 1 {
		t.Errorf("out-of-range pick gave %d, want the first candidate (1)", got)
	}
	// One candidate needs no choice: the picker is not asked.
	asked := 0
	counting := PickerFunc(func(Candidates) int { asked++; return 0 })
	var one nodeSet
	one.add(2)
	if got := (&router{picker: counting}).choose(top, one); got != 2 || asked != 0 {
		t.Errorf("one candidate: picked %d after asking the picker %d times, want 2 without asking", got, asked)
	}
}

// TestSelectionAllocatesNothing: selection runs on every read.
func TestSelectionAllocatesNothing(t *testing.T) {
	top := snapshot(
		spec{role: rolePrimary},
		spec{role: roleReplica, replay: 100, zone: "a"},
		spec{role: roleReplica, replay: 300, zone: "b"},
		spec{role: roleReplica, replay: 200, zone: "b"},
	)
	for _, p := range []Policy{PolicyRoundRobin, PolicyRandom, PolicyLeastLag, PolicyLatency} {
		picker := newPicker(p)
		pl := plan{topo: top, need: 150, zone: "b", maxLag: time.Second}
		allocs := testing.AllocsPerRun(200, func() {
			if set := pl.replicas(true); set == 0 || !set.has(pick(picker, top, set)) {
				t.Fatal("no replica")
			}
		})
		if allocs != 0 {
			t.Errorf("policy %d: %v allocations per selection, want 0", p, allocs)
		}
	}
}

// BenchmarkSelect measures replica selection on the hot path for every
// policy.
func BenchmarkSelect(b *testing.B) {
	for _, pc := range []struct {
		name   string
		policy Policy
		zone   string
	}{
		{"round_robin", PolicyRoundRobin, ""},
		{"random", PolicyRandom, ""},
		{"least_lag", PolicyLeastLag, ""},
		{"latency", PolicyLatency, ""},
		{"zone", PolicyRoundRobin, "b"},
	} {
		b.Run(pc.name, func(b *testing.B) {
			top := snapshot(
				spec{role: rolePrimary},
				spec{role: roleReplica, replay: 100, zone: "a", rtt: time.Millisecond},
				spec{role: roleReplica, replay: 200, zone: "b", rtt: 2 * time.Millisecond},
				spec{role: roleReplica, replay: 300, zone: "a", rtt: 3 * time.Millisecond},
			)
			picker := newPicker(pc.policy)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				pl := plan{topo: top, need: 150, zone: pc.zone}
				for pb.Next() {
					if set := pl.replicas(true); set == 0 || pick(picker, top, set) < 0 {
						b.Fatal("no replica")
					}
				}
			})
		})
	}
}
