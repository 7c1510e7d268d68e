package pgreplica

import (
	"context"
	"slices"
	"testing"
	"time"

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
