package marks

import (
	"context"
	"errors"
	"os/exec"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeCapturer answers captures with pos, after gate (if set) opens.
type fakeCapturer struct {
	pos            atomic.Uint64
	primary        bool
	closed         bool
	err            error
	gate           chan struct{}
	calls, counted atomic.Int64
	inserts        atomic.Int64
}

func (f *fakeCapturer) Capture(ctx context.Context, insert bool) (uint64, error) {
	f.calls.Add(1)
	if insert {
		f.inserts.Add(1)
	}
	if f.gate != nil {
		<-f.gate
	}
	return f.pos.Load(), f.err
}
func (f *fakeCapturer) KnowsPrimary() bool { return f.primary }
func (f *fakeCapturer) Closed() bool       { return f.closed }
func (f *fakeCapturer) Captured()          { f.counted.Add(1) }

func TestResolveSharesCaptures(t *testing.T) {
	var m Cluster
	f := &fakeCapturer{primary: true, gate: make(chan struct{})}
	f.pos.Store(1000)
	ticket := m.Issue(true, true, false)
	if s := m.Snapshot(); s.PendingAll != ticket || s.PendingShared != ticket || s.WriteAt == 0 {
		t.Fatalf("snapshot before the capture = %+v, want ticket %d pending", s, ticket)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if err := m.Resolve(context.Background(), f, ticket); err != nil {
				t.Error(err)
			}
		})
	}
	time.Sleep(10 * time.Millisecond)
	close(f.gate)
	wg.Wait()
	if got := f.calls.Load(); got != 1 {
		t.Errorf("captures = %d, want 1 shared by every caller", got)
	}
	if got := f.counted.Load(); got != 1 {
		t.Errorf("counted captures = %d, want 1", got)
	}
	if m.Covered() < ticket || m.All() != 1000 || m.Shared() != 1000 {
		t.Errorf("covered %d all %d shared %d, want ticket %d covered at 1000", m.Covered(), m.All(), m.Shared(), ticket)
	}
	if s := m.Snapshot(); s.PendingAll != 0 || s.PendingShared != 0 {
		t.Errorf("snapshot after the capture = %+v, want nothing pending", s)
	}
}

func TestSessionWriteRaisesOnlyAll(t *testing.T) {
	var m Cluster
	f := &fakeCapturer{primary: true}
	f.pos.Store(500)
	m.Issue(true, true, false)
	if err := m.Resolve(context.Background(), f, m.Issued()); err != nil {
		t.Fatal(err)
	}
	f.pos.Store(900)
	tk := m.Issue(true, false, false) // a write made with a Session
	if m.PendingShared() != 0 {
		t.Errorf("a Session's write left a shared ticket pending")
	}
	if err := m.Resolve(context.Background(), f, tk); err != nil {
		t.Fatal(err)
	}
	if m.All() != 900 || m.Shared() != 500 {
		t.Errorf("all %d shared %d, want 900 and 500", m.All(), m.Shared())
	}
}

func TestProbeCovers(t *testing.T) {
	var m Cluster
	tk := m.Issue(true, true, false)
	p := m.Probing()
	later := m.Issue(true, true, false) // after the probe was sent
	p.Probed(2000)
	if m.Covered() != tk || m.All() != 2000 {
		t.Errorf("covered %d all %d, want %d at 2000", m.Covered(), m.All(), tk)
	}
	if m.Covered() >= later {
		t.Errorf("a probe covered a ticket issued after it was sent")
	}

	// A ticket that may have seen an asynchronous commit needs the
	// insert position: a probe's flush position does not cover it.
	var a Cluster
	a.Issue(true, true, true)
	a.Probing().Probed(3000)
	if a.Covered() != 0 {
		t.Errorf("a probe covered an asynchronous commit")
	}
	f := &fakeCapturer{primary: true}
	f.pos.Store(3100)
	if err := a.Resolve(context.Background(), f, a.Issued()); err != nil || f.inserts.Load() != 1 {
		t.Errorf("resolve: err %v, insert captures %d, want the insert position read once", err, f.inserts.Load())
	}
	Probe{}.Probed(10) // a zero Probe covers nothing
}

func TestCapturerFor(t *testing.T) {
	var m Cluster
	blind := &fakeCapturer{}
	if got := m.CapturerFor(blind); got != blind {
		t.Errorf("no writer: capturer %v, want the caller", got)
	}
	writer := &fakeCapturer{primary: true}
	var wc Capturer = writer
	m.Wrote(&wc)
	if got := m.CapturerFor(blind); got != writer {
		t.Errorf("capturer %v, want the latest writer, which knows the primary", got)
	}
	seeing := &fakeCapturer{primary: true}
	if got := m.CapturerFor(seeing); got != seeing {
		t.Errorf("a caller that knows the primary captures itself")
	}
	writer.closed = true
	if got := m.CapturerFor(blind); got != blind {
		t.Errorf("a closed writer still captured")
	}
	var sc Capturer = seeing
	m.Offer(&sc) // has one: kept
	if got := m.capturer.Load(); got != &wc {
		t.Errorf("Offer replaced the cluster's capturer")
	}
}

func TestResolveError(t *testing.T) {
	var m Cluster
	want := errors.New("no primary")
	f := &fakeCapturer{primary: true, err: want}
	tk := m.Issue(true, true, false)
	if err := m.Resolve(context.Background(), f, tk); !errors.Is(err, want) {
		t.Errorf("err = %v, want %v", err, want)
	}
	if m.Covered() != 0 || f.counted.Load() != 0 {
		t.Errorf("a failed capture covered or counted")
	}
}

// TestHotReadsInline checks that what every statement reads of the marks
// compiles to plain atomic loads in the caller: no call.
func TestHotReadsInline(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the package")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	out, err := exec.Command(gobin, "build", "-gcflags=-m", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, fn := range []string{"Snapshot", "Covered", "All"} {
		if !regexp.MustCompile(`can inline \(\*Cluster\)\.` + fn + `\b`).Match(out) {
			t.Errorf("(*Cluster).%s does not inline", fn)
		}
	}
}
