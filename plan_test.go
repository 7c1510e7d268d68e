package pgreplica

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica/internal/marks"
	"github.com/pgreplica/pgreplica/internal/stmtclass"
)

// TestDecide: the routing decision is a function of values; no SQL, no
// network. Each row is one statement under one requirement.
func TestDecide(t *testing.T) {
	now := time.Unix(1000, 0)
	top := snapshot(
		spec{role: rolePrimary},
		spec{role: roleReplica, replay: 500, zone: "a", lag: 10 * time.Millisecond},
		spec{role: roleReplica, replay: 900, zone: "b", lag: 2 * time.Second},
	)
	read, write := stmtclass.Classify("SELECT 1"), stmtclass.Classify("UPDATE t SET x = 1")
	sess := NewSession()
	sess.advance(800, 1, 7)
	bg := context.Background()
	cfg := Config{WaitBudget: 150 * time.Millisecond, Fallback: FallbackPrimary, MaxLag: time.Second}

	cases := []struct {
		name     string
		cls      stmtclass.Class
		ctx      context.Context
		cfg      func(*Config)
		process  processLSNs
		deadline time.Time
		// want
		primary  bool
		need     LSN
		maxLag   time.Duration
		fresh    []int
		fallback Fallback
		session  *Session
		wantDL   time.Time
	}{
		{name: "write", cls: write, ctx: bg, primary: true},
		{name: "read hinted to the primary", cls: stmtclass.Classify("/* pgreplica:primary */ SELECT 1"), ctx: bg, primary: true},
		{name: "WithPrimary", cls: read, ctx: WithPrimary(bg), primary: true},
		{name: "process default, nothing written: lag bound applies", cls: read, ctx: bg, maxLag: time.Second, fresh: []int{1}},
		{name: "process default after a write", cls: read, ctx: bg, process: processLSNs{all: 700}, need: 700, fresh: []int{2}},
		{name: "default eventual", cls: read, ctx: bg, cfg: func(c *Config) { c.Consistency = ConsistencyEventual }, process: processLSNs{all: 700}, maxLag: time.Second, fresh: []int{1}},
		{name: "default primary", cls: read, ctx: bg, cfg: func(c *Config) { c.Consistency = ConsistencyPrimary }, primary: true},
		{name: "session", cls: read, ctx: WithSession(bg, sess), need: 800, fresh: []int{2}, session: sess},
		{name: "session below the process's session-less writes", cls: read, ctx: WithSession(bg, sess), process: processLSNs{all: 990, shared: 850},
			need: 850, fresh: []int{2}, session: sess},
		{name: "session above them", cls: read, ctx: WithSession(bg, sess), process: processLSNs{all: 990, shared: 600}, need: 800, fresh: []int{2}, session: sess},
		{name: "token above the session", cls: read, ctx: WithMinLSN(WithSession(bg, sess), 950), need: 950, session: sess},
		{name: "staleness", cls: read, ctx: WithMaxStaleness(bg, 3*time.Second), maxLag: 3 * time.Second, fresh: []int{1, 2}},
		{name: "eventual", cls: read, ctx: WithEventual(bg), maxLag: time.Second, fresh: []int{1}},
		{name: "zone", cls: read, ctx: WithEventual(bg), cfg: func(c *Config) { c.Zone = "b"; c.MaxLag = 0 }, fresh: []int{2}},
		{name: "replica only", cls: read, ctx: WithFallback(WithSession(bg, sess), FallbackError), need: 800, fresh: []int{2}, fallback: FallbackError, session: sess},
		{name: "context deadline before the budget", cls: read, ctx: bg, deadline: now.Add(50 * time.Millisecond), maxLag: time.Second, fresh: []int{1},
			wantDL: now.Add(50 * time.Millisecond)},
		{name: "session on a write", cls: write, ctx: WithSession(bg, sess), primary: true, session: sess},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			if tc.cfg != nil {
				tc.cfg(&c)
			}
			var pl plan
			s := settingsOf(&c)
			process := func() processLSNs { return tc.process }
			err := pl.decide(top, tc.cls, requirementFrom(tc.ctx), &s, process, now, tc.deadline)
			if err != nil {
				t.Fatal(err)
			}
			wantDL := tc.wantDL
			if wantDL.IsZero() {
				wantDL = now.Add(c.WaitBudget)
			}
			wantFallback := tc.fallback
			if pl.onPrimary != tc.primary || pl.need != tc.need || pl.maxLag != tc.maxLag || pl.fallback != wantFallback ||
				pl.session != tc.session || !pl.deadline.Equal(wantDL) {
				t.Errorf("plan primary=%v need=%s maxLag=%v fallback=%v session=%p deadline=+%v;\nwant primary=%v need=%s maxLag=%v fallback=%v session=%p deadline=+%v",
					pl.onPrimary, pl.need, pl.maxLag, pl.fallback, pl.session, pl.deadline.Sub(now),
					tc.primary, tc.need, tc.maxLag, wantFallback, tc.session, wantDL.Sub(now))
			}
			if !tc.primary {
				if got := members(pl.fresh); !slices.Equal(got, tc.fresh) {
					t.Errorf("fresh replicas %v, want %v", got, tc.fresh)
				}
			}
		})
	}
}

// TestDecideReadsWatermarksOnlyWhenNeeded: the process watermarks are two
// cache lines away; an eventual read, a staleness bound or a write does
// not read them, a default or session read does.
func TestDecideReadsWatermarksOnlyWhenNeeded(t *testing.T) {
	top := snapshot(spec{role: rolePrimary}, spec{role: roleReplica, replay: 500})
	cfg := Config{WaitBudget: time.Second, Fallback: FallbackPrimary}
	s := settingsOf(&cfg)
	bg := context.Background()
	for _, tc := range []struct {
		name string
		cls  stmtclass.Class
		ctx  context.Context
		want bool
	}{
		{"eventual", stmtclass.Classify("SELECT 1"), WithEventual(bg), false},
		{"staleness", stmtclass.Classify("SELECT 1"), WithMaxStaleness(bg, time.Second), false},
		{"write", stmtclass.Classify("UPDATE t SET x = 1"), bg, false},
		{"default (process)", stmtclass.Classify("SELECT 1"), bg, true},
		{"session", stmtclass.Classify("SELECT 1"), WithSession(bg, NewSession()), true},
	} {
		read := false
		var pl plan
		if err := pl.decide(top, tc.cls, requirementFrom(tc.ctx), &s, func() processLSNs { read = true; return processLSNs{} }, time.Time{}, time.Time{}); err != nil {
			t.Fatal(err)
		}
		if read != tc.want {
			t.Errorf("%s: watermarks read %v, want %v", tc.name, read, tc.want)
		}
	}
}

// TestDecideNeedsAWritePositionCoveredWhilePlanning: a session read takes
// its need from the session's watermark, then looks for the session's
// pending write. A capture that covers the write in between (here while
// the plan reads the process watermarks) must not leave the plan needing
// neither the write's ticket nor its position.
func TestDecideNeedsAWritePositionCoveredWhilePlanning(t *testing.T) {
	top := snapshot(spec{role: rolePrimary}, spec{role: roleReplica, replay: 500}, spec{role: roleReplica, replay: 900})
	top.marks = new(marks.Cluster)
	sess := NewSession()
	sess.advance(400, 1, 7)
	ticket := top.marks.Issue(true, false, false)
	sess.notePending(top.sysid, top.timeline, nil, top.marks, ticket, true)

	cfg := Config{WaitBudget: time.Second, Fallback: FallbackPrimary}
	s := settingsOf(&cfg)
	process := func() processLSNs {
		// The write's position is read now: 800, past the first replica.
		if err := top.marks.Resolve(context.Background(), fixedCapture(800), ticket); err != nil {
			t.Fatal(err)
		}
		return processLSNs{}
	}
	var pl plan
	if err := pl.decide(top, stmtclass.Classify("SELECT 1"), requirementFrom(WithSession(context.Background(), sess)), &s, process, time.Time{}, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if pl.need < 800 && pl.pending == 0 {
		t.Fatalf("plan needs %s with nothing pending; the session wrote at 800", pl.need)
	}
	if got := members(pl.fresh); !slices.Equal(got, []int{2}) {
		t.Errorf("fresh replicas %v, want [2] (replica 1 replayed 500 only)", got)
	}
}

// fixedCapture is a marks.Capturer that reads the same position each time.
type fixedCapture uint64

func (f fixedCapture) Capture(context.Context, bool) (uint64, error) { return uint64(f), nil }
func (fixedCapture) KnowsPrimary() bool                              { return true }
func (fixedCapture) Closed() bool                                    { return false }
func (fixedCapture) Captured()                                       {}
