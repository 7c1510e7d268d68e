package pgreplica

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestSessionAdvanceMaxMerge(t *testing.T) {
	s := NewSession()
	if s.LSN() != 0 {
		t.Fatalf("new session LSN = %v", s.LSN())
	}
	if !s.advance(100, 1, 0) || s.LSN() != 100 {
		t.Fatalf("advance(100) -> %v", s.LSN())
	}
	s.advance(50, 1, 0)
	if s.LSN() != 100 {
		t.Fatalf("a lower LSN lowered the watermark to %v", s.LSN())
	}
	s.advance(200, 2, 0)
	s.advance(150, 1, 0)
	if got := s.Snapshot(); got != (Token{LSN: 200, Timeline: 2}) {
		t.Fatalf("snapshot = %+v", got)
	}
	// Binding to a cluster.
	if !s.advance(210, 2, 7) || s.Snapshot().SystemID != 7 {
		t.Fatalf("session did not bind to system 7: %+v", s.Snapshot())
	}
	if s.advance(9999, 9, 8) {
		t.Fatal("advance from another cluster was accepted")
	}
	if got := s.Snapshot(); got != (Token{LSN: 210, Timeline: 2, SystemID: 7}) {
		t.Fatalf("advance from another cluster changed the session: %+v", got)
	}
	if !s.advance(220, 2, 0) || s.LSN() != 220 {
		t.Fatal("advance with an unknown system identifier should apply")
	}
}

func TestSessionMerge(t *testing.T) {
	s := NewSession()
	if err := s.Merge(Token{LSN: 10, Timeline: 1}); err != nil || s.LSN() != 10 {
		t.Fatalf("Merge: %v, LSN %v", err, s.LSN())
	}
	if err := s.Merge(Token{LSN: 5, Timeline: 1, SystemID: 42}); err != nil || s.LSN() != 10 {
		t.Fatalf("Merge(lower): %v, LSN %v", err, s.LSN())
	}
	err := s.Merge(Token{LSN: 1000, Timeline: 5, SystemID: 43})
	if !errors.Is(err, ErrBadToken) || !errors.Is(err, errTokenOtherCluster) {
		t.Fatalf("Merge(other cluster) error %v", err)
	}
	if got := s.Snapshot(); got != (Token{LSN: 10, Timeline: 1, SystemID: 42}) {
		t.Fatalf("a rejected Merge changed the session: %+v", got)
	}
	// A token from an older timeline is honoured (see the failover rule).
	if err := s.Merge(Token{LSN: 500, Timeline: 0}); err != nil || s.LSN() != 500 {
		t.Fatalf("Merge(old timeline): %v, LSN %v", err, s.LSN())
	}

	// The driver's merge checks the token against the cluster it serves.
	d := NewSession()
	if err := d.merge(Token{LSN: 1, SystemID: 1}, 2); !errors.Is(err, errTokenOtherCluster) || d.Snapshot() != (Token{}) {
		t.Fatalf("merge(token of 1, cluster 2) = %v, session %+v", err, d.Snapshot())
	}
	if err := d.merge(Token{LSN: 3}, 2); err != nil || d.Snapshot() != (Token{LSN: 3, SystemID: 2}) {
		t.Fatalf("merge(unknown cluster token) = %v, session %+v", err, d.Snapshot())
	}
	if err := d.merge(Token{LSN: 4}, 5); !errors.Is(err, errTokenOtherCluster) || d.LSN() != 3 {
		t.Fatalf("merge into a session of another cluster = %v, LSN %v", err, d.LSN())
	}

	// A nil session is inert.
	var n *Session
	if n.LSN() != 0 || n.Merge(Token{LSN: 1}) != nil || n.advance(1, 1, 1) {
		t.Fatal("nil session is not inert")
	}
}

func TestSessionTokenRoundTrip(t *testing.T) {
	s := NewSession()
	s.advance(0x16_B374D848, 3, 1234)
	tok, err := ParseToken(s.Token())
	if err != nil {
		t.Fatal(err)
	}
	other := NewSession()
	if err := other.Merge(tok); err != nil {
		t.Fatal(err)
	}
	if other.Snapshot() != s.Snapshot() {
		t.Fatalf("merged %+v, want %+v", other.Snapshot(), s.Snapshot())
	}
}

func TestSessionConcurrentAdvance(t *testing.T) {
	const (
		goroutines = 32
		perG       = 2000
	)
	s := NewSession()
	// The timeline that comes with an LSN grows with it, so a snapshot
	// must never show an LSN with a timeline older than the one it came
	// with.
	tlOf := func(l LSN) uint32 { return uint32(l/10000) + 1 }
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var readerErr error
	var readerWG sync.WaitGroup
	readerWG.Add(1)
	go func() {
		defer readerWG.Done()
		var last LSN
		for {
			select {
			case <-stop:
				return
			default:
			}
			snap := s.Snapshot()
			if snap.LSN < last {
				readerErr = errors.New("watermark went backwards")
				return
			}
			last = snap.LSN
			if snap.LSN != 0 && snap.Timeline < tlOf(snap.LSN) {
				readerErr = errors.New("snapshot shows an LSN with an older timeline")
				return
			}
			_ = s.Token()
		}
	}()
	for g := range goroutines {
		wg.Go(func() {
			for i := range perG {
				// Interleave rising and falling positions.
				l := LSN((i*goroutines + g) * 7 % (goroutines * perG))
				if i%2 == 1 {
					l = LSN(goroutines*perG - 1 - int(l))
				}
				if g == goroutines/2 && i == perG/3 {
					l = goroutines * perG // the maximum, once, mid-run
				}
				if !s.advance(l, tlOf(l), 99) {
					t.Error("advance refused")
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	readerWG.Wait()
	if readerErr != nil {
		t.Fatal(readerErr)
	}
	want := LSN(goroutines * perG)
	if got := s.Snapshot(); got != (Token{LSN: want, Timeline: tlOf(want), SystemID: 99}) {
		t.Fatalf("final %+v, want LSN %v timeline %d", got, want, tlOf(want))
	}
}

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
	want := requirement{minLSN: 100, primary: true, eventual: true, maxStaleness: time.Second, fallback: FallbackError}
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
	s := NewSession()
	s.advance(300, 1, 7)

	// A session bound to cluster 7 applies to cluster 7 (and to an
	// unknown one), and not to cluster 8.
	for _, c := range []struct {
		sysid uint64
		kind  readKind
		lsn   LSN
	}{{7, readPosition, 300}, {0, readPosition, 300}, {8, readEventual, 0}} {
		kind, lsn, err := requirementFrom(WithEventual(WithSession(bg, s))).decide(c.sysid)
		if err != nil || kind != c.kind || lsn != c.lsn {
			t.Errorf("session of 7 on cluster %d: %v, %v, %v; want %v, %v", c.sysid, kind, lsn, err, c.kind, c.lsn)
		}
	}

	tok := WithToken(bg, Token{LSN: 50, SystemID: 7})
	if _, _, err := requirementFrom(tok).decide(8); !errors.Is(err, ErrBadToken) {
		t.Errorf("token of cluster 7 read on cluster 8: %v", err)
	}
	if kind, lsn, err := requirementFrom(tok).decide(7); err != nil || kind != readPosition || lsn != 50 {
		t.Errorf("token of cluster 7 read on cluster 7: %v %v %v", kind, lsn, err)
	}
	clash := WithToken(tok, Token{LSN: 60, SystemID: 9})
	if _, _, err := requirementFrom(clash).decide(0); !errors.Is(err, errTokenOtherCluster) {
		t.Errorf("tokens of two clusters: %v", err)
	}
	if kind, _, err := requirementFrom(WithPrimary(clash)).decide(8); err != nil || kind != readPrimary {
		t.Errorf("primary read with a foreign token: %v %v", kind, err)
	}
	if _, _, err := requirementFrom(WithToken(tok, Token{LSN: 1})).decide(7); err != nil {
		t.Errorf("a token without a system identifier clashed: %v", err)
	}
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
	if got := requirementFrom(WithFallback(ctx, FallbackDefault)).fallbackOr(FallbackPrimary); got != FallbackPrimary {
		t.Fatalf("FallbackDefault: %v", got)
	}
}

func TestHotPathAllocs(t *testing.T) {
	s := NewSession()
	ctx := WithMinLSN(WithSession(context.Background(), s), 5)
	n := testing.AllocsPerRun(200, func() {
		r := requirementFrom(ctx)
		_, _, _ = r.decide(1)
		s.advance(LSN(10), 1, 1)
		_ = s.LSN()
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

func BenchmarkSessionAdvanceParallel(b *testing.B) {
	s := NewSession()
	b.RunParallel(func(pb *testing.PB) {
		var l LSN
		for pb.Next() {
			l++
			s.advance(l, 1, 1)
		}
	})
}

func TestSessionWriteLSN(t *testing.T) {
	s := NewSession()
	s.advance(100, 1, 7) // a read
	if s.WriteLSN() != 0 || s.LSN() != 100 {
		t.Fatalf("after a read: write %s, lsn %s", s.WriteLSN(), s.LSN())
	}
	s.advanceWrite(200, 1, 7)
	s.advanceWrite(150, 1, 7) // never lowers
	if s.WriteLSN() != 200 || s.LSN() != 200 {
		t.Fatalf("after writes: write %s, lsn %s", s.WriteLSN(), s.LSN())
	}
	s.advanceWrite(300, 1, 8) // another cluster: ignored
	if s.WriteLSN() != 200 {
		t.Fatalf("a write on another cluster moved the session to %s", s.WriteLSN())
	}
	if (*Session)(nil).WriteLSN() != 0 {
		t.Fatal("nil session")
	}
}
