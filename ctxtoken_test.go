package pgreplica

import (
	"context"
	"testing"
	"time"
)

func TestRequirementCopySemantics(t *testing.T) {
	base := context.Background()
	if requirementFrom(base) != nil || SessionFrom(base) != nil {
		t.Fatal("background context has a requirement")
	}
	s := NewSession()
	parent := WithMinLSN(WithSession(base, s), 100)
	before := *requirementFrom(parent)

	child := WithPrimary(WithMinLSN(WithFallback(WithMaxStaleness(WithEventual(parent), time.Second), FallbackError), 50))
	child = WithSession(child, nil)
	if *requirementFrom(parent) != before {
		t.Fatalf("deriving a context changed the parent's requirement: %+v", *requirementFrom(parent))
	}
	got := *requirementFrom(child)
	if got.fallback == nil || *got.fallback != FallbackError {
		t.Fatalf("child fallback %v, want FallbackError", got.fallback)
	}
	got.fallback = nil
	want := requirement{minLSN: 100, primary: true, eventual: true, maxStaleness: time.Second}
	if got != want {
		t.Fatalf("child requirement %+v, want %+v", got, want)
	}
	if SessionFrom(parent) != s || SessionFrom(child) != nil {
		t.Fatal("SessionFrom")
	}
	// Sibling contexts do not see each other.
	a := WithMinLSN(parent, 500)
	b := WithMinLSN(parent, 300)
	if requirementFrom(a).minLSN != 500 || requirementFrom(b).minLSN != 300 || requirementFrom(parent).minLSN != 100 {
		t.Fatal("siblings share a requirement")
	}
	// Unrelated context values in between do not hide the requirement.
	type other struct{}
	c := context.WithValue(a, other{}, 1)
	if requirementFrom(WithFallback(c, FallbackPrimary)).minLSN != 500 {
		t.Fatal("requirement lost through an unrelated context value")
	}
	if d := requirementFrom(WithMaxStaleness(WithMaxStaleness(base, time.Second), -time.Second)).maxStaleness; d != 0 {
		t.Fatalf("a negative staleness should remove the bound, got %v", d)
	}
}

func TestRequirementPrecedence(t *testing.T) {
	bg := context.Background()
	s := NewSession()
	s.advance(300, 1, 0)
	const sysid = 0
	cases := []struct {
		name string
		ctx  context.Context
		kind readKind
		lsn  LSN
	}{
		{"none", bg, readDefault, 0},
		{"fallback only", WithFallback(bg, FallbackError), readDefault, 0},
		{"eventual", WithEventual(bg), readEventual, 0},
		{"staleness beats eventual", WithMaxStaleness(WithEventual(bg), time.Second), readStaleness, 0},
		{"min LSN beats staleness", WithMaxStaleness(WithMinLSN(bg, 10), time.Second), readPosition, 10},
		{"zero min LSN adds nothing", WithMinLSN(WithEventual(bg), 0), readEventual, 0},
		{"session beats staleness", WithMaxStaleness(WithSession(bg, s), time.Second), readPosition, 300},
		{"empty session decides", WithEventual(WithSession(bg, NewSession())), readPosition, 0},
		{"max of session and min LSN", WithMinLSN(WithSession(bg, s), 400), readPosition, 400},
		{"max of min LSN and session", WithMinLSN(WithSession(bg, s), 200), readPosition, 300},
		{"min LSN max-merges", WithMinLSN(WithMinLSN(bg, 700), 600), readPosition, 700},
		{"token", WithToken(WithMinLSN(bg, 5), Token{LSN: 9, Timeline: 2}), readPosition, 9},
		{"primary beats all", WithEventual(WithMaxStaleness(WithMinLSN(WithSession(WithPrimary(bg), s), 9), time.Second)), readPrimary, 0},
	}
	for _, c := range cases {
		r := requirementFrom(c.ctx)
		kind, lsn, err := r.decide(sysid)
		if err != nil || kind != c.kind || lsn != c.lsn {
			t.Errorf("%s: decide = %v, %v, %v; want %v, %v", c.name, kind, lsn, err, c.kind, c.lsn)
		}
	}
	// The session's watermark is read at decision time, not when the
	// context was made.
	ctx := WithSession(bg, s)
	s.advance(900, 1, 0)
	if _, lsn, _ := requirementFrom(ctx).decide(0); lsn != 900 {
		t.Fatalf("session watermark read too early: %v", lsn)
	}
}

func TestRequirementClusters(t *testing.T) {
	bg := context.Background()
	type want struct {
		sysid uint64
		kind  readKind
		lsn   LSN
	}
	check := func(name string, ctx context.Context, cases ...want) {
		t.Helper()
		for _, c := range cases {
			kind, lsn, err := requirementFrom(ctx).decide(c.sysid)
			if err != nil || kind != c.kind || lsn != c.lsn {
				t.Errorf("%s on cluster %d: %v, %v, %v; want %v, %v", name, c.sysid, kind, lsn, err, c.kind, c.lsn)
			}
		}
	}

	// A session applies to every cluster, each with its own watermark.
	s := NewSession()
	s.advance(300, 1, 7)
	s.advanceWrite(500, 1, 8)
	check("session of 7 and 8", WithEventual(WithSession(bg, s)),
		want{7, readPosition, 300}, want{8, readPosition, 500}, want{9, readPosition, 0}, want{0, readPosition, 500})

	// A token's position for another cluster does not apply (it used to
	// fail the read).
	tok := WithToken(bg, Token{LSN: 50, SystemID: 7})
	check("token of 7", WithEventual(tok),
		want{7, readPosition, 50}, want{8, readEventual, 0}, want{0, readPosition, 50})
	// Tokens of two clusters combine per cluster (they used to clash).
	two := WithToken(tok, Token{LSN: 60, SystemID: 9})
	check("tokens of 7 and 9", two,
		want{7, readPosition, 50}, want{9, readPosition, 60}, want{8, readDefault, 0}, want{0, readPosition, 60})
	check("tokens of 7 (raised) and 9", WithToken(two, Token{LSN: 70, SystemID: 7}),
		want{7, readPosition, 70}, want{9, readPosition, 60})
	check("tokens of 7 (lower) and 9", WithToken(two, Token{LSN: 10, SystemID: 7}),
		want{7, readPosition, 50}, want{9, readPosition, 60})
	check("primary with tokens", WithPrimary(two), want{8, readPrimary, 0})
	// A position whose cluster is not known applies everywhere.
	check("token without a system identifier", WithToken(tok, Token{LSN: 20}),
		want{7, readPosition, 50}, want{8, readPosition, 20})
	// One multi-cluster token.
	multi := Token{LSN: 50, SystemID: 7, Others: []Position{{SystemID: 9, LSN: 60}, {LSN: 20}}}
	check("multi-cluster token", WithToken(bg, multi),
		want{7, readPosition, 50}, want{9, readPosition, 60}, want{8, readPosition, 20}, want{0, readPosition, 60})
	// The requirement keeps no slice of the caller's.
	ctx := WithToken(bg, multi)
	multi.Others[0].LSN = 1
	check("after the caller changed its token", ctx, want{9, readPosition, 60})
	// Token and session combine on the read's cluster.
	check("session and token", WithToken(WithSession(bg, s), Token{LSN: 400, SystemID: 7}),
		want{7, readPosition, 400}, want{8, readPosition, 500})
	// An overflowed token needs the unreachable position off its clusters.
	check("overflowed token", WithToken(bg, Token{LSN: 50, SystemID: 7, Overflow: true}),
		want{7, readPosition, 50}, want{8, readPosition, unreachableLSN}, want{0, readPosition, unreachableLSN})
}

func TestFallbackOr(t *testing.T) {
	bg := context.Background()
	if got := requirementFrom(bg).fallbackOr(FallbackPrimary); got != FallbackPrimary {
		t.Fatalf("no requirement: %v", got)
	}
	ctx := WithFallback(WithPrimary(bg), FallbackError)
	if got := requirementFrom(ctx).fallbackOr(FallbackPrimary); got != FallbackError {
		t.Fatalf("FallbackError: %v", got)
	}
	if got := requirementFrom(WithFallback(ctx, FallbackPrimary)).fallbackOr(FallbackError); got != FallbackPrimary {
		t.Fatalf("FallbackPrimary over the connector's FallbackError: %v", got)
	}
}

func TestHotPathAllocs(t *testing.T) {
	s := NewSession()
	for i := range uint64(MaxClusters - 1) {
		s.advance(LSN(i), 1, i+2)
	}
	tok := Token{LSN: 9, SystemID: 1, Others: []Position{{SystemID: 2, LSN: 8}, {LSN: 3}}}
	ctx := WithToken(WithMinLSN(WithSession(context.Background(), s), 5), tok)
	n := testing.AllocsPerRun(200, func() {
		r := requirementFrom(ctx)
		_, _, _ = r.decide(1)
		_, _, _ = r.decide(MaxClusters + 1)
		_, _, _ = r.decide(12345)
		_, _, _ = r.decide(0)
		s.advance(LSN(10), 1, 1)
		s.advanceWrite(LSN(11), 1, MaxClusters)
		_ = s.LSN()
		_ = s.LSNFor(3)
	})
	if n != 0 {
		t.Fatalf("hot path allocates %v times", n)
	}
}

func BenchmarkRequirementDecide(b *testing.B) {
	s := NewSession()
	type otherKey struct{} // a value of someone else's below ours
	ctx := WithMinLSN(WithSession(context.WithValue(context.Background(), otherKey{}, 1), s), 5)
	for b.Loop() {
		_, _, _ = requirementFrom(ctx).decide(1)
	}
}
