package pgreplica

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
)

// tokenIs fails t unless got equals want (Token.Equal).
func tokenIs(t *testing.T, what string, got, want Token) {
	t.Helper()
	if !got.Equal(want) {
		t.Fatalf("%s = %+v, want %+v", what, got, want)
	}
}

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
	tokenIs(t, "snapshot", s.Snapshot(), Token{LSN: 200, Timeline: 2})

	// A cluster gets a watermark of its own; the one of positions whose
	// cluster was not known still applies to it.
	if !s.advance(210, 2, 7) {
		t.Fatal("advance on cluster 7 refused")
	}
	tokenIs(t, "snapshot with cluster 7", s.Snapshot(),
		Token{LSN: 210, Timeline: 2, SystemID: 7, Others: []Position{{Timeline: 2, LSN: 200}}})
	// A second cluster is no longer refused: it is tracked apart.
	if !s.advance(9999, 9, 8) {
		t.Fatal("advance on cluster 8 refused")
	}
	for _, c := range []struct {
		sysid uint64
		want  LSN
	}{{7, 210}, {8, 9999}, {9, 200}, {0, 9999}} {
		if got := s.LSNFor(c.sysid); got != c.want {
			t.Errorf("LSNFor(%d) = %v, want %v", c.sysid, got, c.want)
		}
	}
	if s.LSN() != 210 {
		t.Fatalf("LSN (first cluster) = %v, want 210", s.LSN())
	}
	if !s.advance(220, 2, 0) || s.LSN() != 220 || s.LSNFor(8) != 9999 {
		t.Fatalf("an unknown cluster's position must raise every cluster: %v, %v", s.LSN(), s.LSNFor(8))
	}
	if !s.advance(300, 2, 7) || s.LSNFor(7) != 300 || s.LSNFor(8) != 9999 {
		t.Fatalf("cluster 7's position moved another cluster: %v, %v", s.LSNFor(7), s.LSNFor(8))
	}
}

func TestSessionMerge(t *testing.T) {
	s := NewSession()
	if err := s.Merge(Token{LSN: 10, Timeline: 1}); err != nil || s.LSN() != 10 {
		t.Fatalf("Merge: %v, LSN %v", err, s.LSN())
	}
	if err := s.Merge(Token{LSN: 5, Timeline: 1, SystemID: 42}); err != nil || s.LSN() != 10 || s.LSNFor(42) != 10 {
		t.Fatalf("Merge(lower): %v, LSN %v", err, s.LSN())
	}
	// A token of another cluster is merged for that cluster.
	if err := s.Merge(Token{LSN: 1000, Timeline: 5, SystemID: 43}); err != nil {
		t.Fatalf("Merge(other cluster): %v", err)
	}
	if s.LSNFor(43) != 1000 || s.LSNFor(42) != 10 || s.LSN() != 10 {
		t.Fatalf("after a token of cluster 43: 42 at %v, 43 at %v", s.LSNFor(42), s.LSNFor(43))
	}
	// A token from an older timeline is honoured (see the failover rule).
	if err := s.Merge(Token{LSN: 500, Timeline: 0}); err != nil || s.LSN() != 500 {
		t.Fatalf("Merge(old timeline): %v, LSN %v", err, s.LSN())
	}
	// A multi-cluster token raises each cluster.
	err := s.Merge(Token{LSN: 7, SystemID: 42, Others: []Position{{SystemID: 43, Timeline: 6, LSN: 2000}, {SystemID: 44, Timeline: 1, LSN: 30}}})
	if err != nil {
		t.Fatal(err)
	}
	tokenIs(t, "snapshot", s.Snapshot(), Token{LSN: 7, Timeline: 1, SystemID: 42, Others: []Position{
		{SystemID: 43, Timeline: 6, LSN: 2000}, {SystemID: 44, Timeline: 1, LSN: 30}, {Timeline: 1, LSN: 500}}})
	if s.LSNFor(44) != 500 || s.LSNFor(43) != 2000 {
		t.Fatalf("44 at %v, 43 at %v", s.LSNFor(44), s.LSNFor(43))
	}

	// The driver's merge: every position for its own cluster; the served
	// cluster's first.
	d := NewSession()
	if err := d.merge(Token{LSN: 1, SystemID: 1, Others: []Position{{SystemID: 2, LSN: 3}}}, 2); err != nil {
		t.Fatal(err)
	}
	tokenIs(t, "driver merge", d.Snapshot(), Token{LSN: 3, SystemID: 2, Others: []Position{{SystemID: 1, LSN: 1}}})

	// A nil session is inert.
	var n *Session
	if n.LSN() != 0 || n.LSNFor(1) != 0 || n.Merge(Token{LSN: 1}) != nil || n.advance(1, 1, 1) || n.WriteCount() != 0 {
		t.Fatal("nil session is not inert")
	}
	n.advanceWrite(1, 1, 1)
	if _, ok := n.lsnFor(1); ok {
		t.Fatal("a nil session applies")
	}
}

func TestSessionTokenRoundTrip(t *testing.T) {
	s := NewSession()
	s.advance(0x16_B374D848, 3, 1234)
	s.advanceWrite(0x2_00000010, 1, 5678)
	s.advance(0x40, 1, 0)
	tok, err := ParseToken(s.Token())
	if err != nil {
		t.Fatal(err)
	}
	tokenIs(t, "parsed", tok, s.Snapshot())
	other := NewSession()
	if err := other.Merge(tok); err != nil {
		t.Fatal(err)
	}
	tokenIs(t, "merged", other.Snapshot(), s.Snapshot())
	for _, sysid := range []uint64{0, 1234, 5678, 999} {
		if other.LSNFor(sysid) != s.LSNFor(sysid) {
			t.Errorf("LSNFor(%d): %v after the round trip, %v before", sysid, other.LSNFor(sysid), s.LSNFor(sysid))
		}
	}
	if other.WriteCount() != 0 || other.WriteLSN() != 0 {
		t.Fatal("a merged token counted as a write")
	}

	// One cluster: a version 1 token, as before.
	one := NewSession()
	one.advance(0x16_B374D848, 3, 7449373393844797465)
	if got := one.Token(); got != "AQAAAAAWs3TYSAAAAANnYX2iG12AGQ" {
		t.Fatalf("single-cluster token %q is not the version 1 one", got)
	}
}

// TestSessionTwoClustersAcrossProcesses is the reported case: one session
// writes to cluster A and then to cluster B; its token, taken to another
// process, must make reads of both clusters wait for the writes.
func TestSessionTwoClustersAcrossProcesses(t *testing.T) {
	const a, b = 0x1111, 0x2222
	s := NewSession()
	ctx := WithSession(context.Background(), s)
	s.advanceWrite(0x5_00000100, 1, a)
	s.advanceWrite(0x0_00300000, 1, b) // B's LSNs are far below A's
	if s.WriteCount() != 2 {
		t.Fatalf("WriteCount %d, want 2", s.WriteCount())
	}
	for sysid, want := range map[uint64]LSN{a: 0x5_00000100, b: 0x0_00300000} {
		if _, lsn, _ := requirementFrom(ctx).decide(sysid); lsn != want {
			t.Fatalf("in the writing process, cluster %x needs %v, want %v", sysid, lsn, want)
		}
	}

	tok, err := TokenCodec{Key: testKey}.Decode(TokenCodec{Key: testKey}.SessionToken(s))
	if err != nil {
		t.Fatal(err)
	}
	fresh := NewSession()
	if err := fresh.Merge(tok); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ctx  context.Context
		name string
	}{{WithSession(context.Background(), fresh), "session"}, {WithToken(context.Background(), tok), "token"}} {
		for sysid, want := range map[uint64]LSN{a: 0x5_00000100, b: 0x0_00300000} {
			kind, lsn, err := requirementFrom(c.ctx).decide(sysid)
			if err != nil || kind != readPosition || lsn != want {
				t.Errorf("%s in another process, cluster %x: %v %v %v, want %v", c.name, sysid, kind, lsn, err, want)
			}
		}
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
	tokenIs(t, "final", s.Snapshot(), Token{LSN: want, Timeline: tlOf(want), SystemID: 99})
}

// TestSessionConcurrentClusters: goroutines meeting the same clusters at
// once claim one slot per cluster, never two, and every cluster ends at
// its highest position.
func TestSessionConcurrentClusters(t *testing.T) {
	for range 20 {
		s := NewSession()
		start := make(chan struct{})
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Go(func() {
				<-start
				for i := range 50 {
					sysid := uint64((g+i)%MaxClusters + 1)
					s.advanceWrite(LSN(sysid*1000+uint64(i)), 1, sysid)
				}
			})
		}
		close(start)
		wg.Wait()
		snap := s.Snapshot()
		seen := map[uint64]bool{}
		for _, p := range snap.Positions() {
			if seen[p.SystemID] {
				t.Fatalf("cluster %d tracked twice: %+v", p.SystemID, snap)
			}
			seen[p.SystemID] = true
			if p.LSN != LSN(p.SystemID*1000+49) {
				t.Fatalf("cluster %d at %v", p.SystemID, p.LSN)
			}
		}
		if len(seen) != MaxClusters || snap.Overflow || s.WriteCount() != 16*50 {
			t.Fatalf("%d clusters, overflow %v, %d writes", len(seen), snap.Overflow, s.WriteCount())
		}
	}
}

// TestSessionBound: past MaxClusters a write (or a token) never loses its
// read-your-writes: the session overflows and reads on clusters it does
// not track need an unreachable position, while the tracked ones keep
// theirs; a read's position past the bound is dropped.
func TestSessionBound(t *testing.T) {
	s := NewSession()
	for i := range uint64(MaxClusters) {
		s.advanceWrite(LSN(100*(i+1)), 1, i+1)
	}
	s.advance(5, 1, 0)
	if snap := s.Snapshot(); snap.Overflow || len(snap.Positions()) != MaxClusters+1 {
		t.Fatalf("full session: %+v", snap)
	}
	// A replica read on a ninth cluster: dropped, no overflow.
	if s.advance(7777, 1, 99) {
		t.Fatal("a read's position past the bound was recorded")
	}
	if s.LSNFor(99) != 5 || s.Snapshot().Overflow {
		t.Fatalf("after a read past the bound: LSNFor(99) = %v, overflow %v", s.LSNFor(99), s.Snapshot().Overflow)
	}
	// A write on a ninth cluster: overflow.
	s.advanceWrite(7777, 1, 99)
	if s.WriteCount() != MaxClusters+1 {
		t.Fatalf("WriteCount %d", s.WriteCount())
	}
	check := func(name string, s *Session) {
		t.Helper()
		for i := range uint64(MaxClusters) {
			if got := s.LSNFor(i + 1); got != LSN(100*(i+1)) {
				t.Errorf("%s: tracked cluster %d at %v, want %v", name, i+1, got, 100*(i+1))
			}
		}
		for _, sysid := range []uint64{99, 100, 0} {
			if got := s.LSNFor(sysid); got != unreachableLSN {
				t.Errorf("%s: untracked cluster %d at %v, want the unreachable LSN", name, sysid, got)
			}
		}
		kind, lsn, err := requirementFrom(WithSession(context.Background(), s)).decide(99)
		if err != nil || kind != readPosition || lsn != unreachableLSN {
			t.Errorf("%s: read on the overflowed cluster: %v %v %v", name, kind, lsn, err)
		}
	}
	check("overflowed session", s)

	// The overflow travels with the token.
	tok, err := ParseToken(s.Token())
	if err != nil {
		t.Fatal(err)
	}
	if !tok.Overflow || len(tok.Positions()) != MaxClusters+1 || tok.LSNFor(99) != unreachableLSN {
		t.Fatalf("token of an overflowed session: %+v", tok)
	}
	fresh := NewSession()
	fresh.Merge(tok)
	check("merged session", fresh)

	// A token with a cluster the session cannot track overflows it too.
	full := NewSession()
	for i := range uint64(MaxClusters) {
		full.advance(1, 1, i+1)
	}
	full.Merge(Token{LSN: 50, SystemID: 1000})
	if !full.Snapshot().Overflow || full.LSNFor(1000) != unreachableLSN || full.LSNFor(3) != 1 {
		t.Fatalf("token past the bound: %+v", full.Snapshot())
	}
}

func TestSessionWriteLSN(t *testing.T) {
	s := NewSession()
	s.advance(100, 1, 7) // a read
	if s.WriteLSN() != 0 || s.WriteCount() != 0 || s.LSN() != 100 {
		t.Fatalf("after a read: write %s (%d), lsn %s", s.WriteLSN(), s.WriteCount(), s.LSN())
	}
	s.advanceWrite(200, 1, 7)
	s.advanceWrite(150, 1, 7) // never lowers, still counts
	if s.WriteLSN() != 200 || s.LSN() != 200 || s.WriteCount() != 2 {
		t.Fatalf("after writes: write %s (%d), lsn %s", s.WriteLSN(), s.WriteCount(), s.LSN())
	}
	// Another cluster: counted, recorded for that cluster; WriteLSN stays
	// the first cluster's.
	s.advanceWrite(300, 1, 8)
	if s.WriteLSN() != 200 || s.WriteCount() != 3 || s.LSNFor(8) != 300 {
		t.Fatalf("a write on another cluster: write %s (%d), cluster 8 at %s", s.WriteLSN(), s.WriteCount(), s.LSNFor(8))
	}
	s.Merge(Token{LSN: 900, SystemID: 7})
	if s.WriteLSN() != 200 || s.WriteCount() != 3 {
		t.Fatal("a merged token counted as a write")
	}
	if (*Session)(nil).WriteLSN() != 0 {
		t.Fatal("nil session")
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

func BenchmarkSessionLSNFor(b *testing.B) {
	s := NewSession()
	for i := range uint64(MaxClusters) {
		s.advance(LSN(i+1), 1, i+1)
	}
	for _, sysid := range []uint64{1, MaxClusters, 0} {
		b.Run(fmt.Sprint("cluster ", sysid), func(b *testing.B) {
			for b.Loop() {
				_, _ = s.lsnFor(sysid)
			}
		})
	}
}
