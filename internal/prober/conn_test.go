package prober

import (
	"context"
	"database/sql/driver"
	"errors"
	"testing"
	"time"
)

// fakeSubscriber is a node whose pool holds one idle connection, on pool
// (nil: none idle).
type fakeSubscriber struct {
	pool    *fakeServer
	lent    int     // how many times it lent pool
	back    []error // what each lent connection was given back with
	answers []*Status
}

func (s *fakeSubscriber) Apply(st *Status) { s.answers = append(s.answers, st) }
func (s *fakeSubscriber) Intervals() (now, busy, idle time.Duration) {
	return time.Hour, time.Hour, time.Hour
}
func (s *fakeSubscriber) Statements() int64 { return 0 }
func (s *fakeSubscriber) LendIdle() Lent {
	if s.pool == nil {
		return nil
	}
	s.lent++
	return fakeLent{s}
}

type fakeLent struct{ s *fakeSubscriber }

func (l fakeLent) Conn() driver.Conn  { return l.s.pool }
func (l fakeLent) Since() time.Time   { return time.Time{} }
func (l fakeLent) CloseSockets()      {}
func (l fakeLent) GiveBack(err error) { l.s.back = append(l.s.back, err) }

// TestProbesOnALentConnection: the first probe connects (it reads the
// role's privileges); later ones go on an idle connection a subscriber
// lends, which goes back with the probe's outcome. Every subscriber gets
// every answer, numbered, until it unsubscribes.
func TestProbesOnALentConnection(t *testing.T) {
	own := &fakeServer{user: "app", row: primarySeenByApp}
	sub := &fakeSubscriber{pool: &fakeServer{row: primarySeenByApp}}
	p := New(Key{Timeout: time.Second}, testConfig(own))
	defer p.closeConn()
	p.Subscribe(sub)
	ctx := context.Background()
	if !p.probeOnce(ctx) || len(own.queries) != 2 || sub.lent != 0 {
		t.Fatalf("first probe: own connection ran %q, %d lent; want the privilege check and the probe, none lent", own.queries, sub.lent)
	}
	if !p.probeOnce(ctx) || len(own.queries) != 2 || sub.lent != 1 || len(sub.pool.queries) != 1 {
		t.Fatalf("second probe: own connection ran %q, the lent one %q", own.queries, sub.pool.queries)
	}
	if len(sub.back) != 1 || sub.back[0] != nil {
		t.Errorf("lent connection given back with %v, want once with nil", sub.back)
	}
	if len(sub.answers) != 2 || sub.answers[0].Seq != 1 || sub.answers[1].Seq != 2 || p.Started() != 2 {
		t.Fatalf("answers %+v, %d started; want probes 1 and 2", sub.answers, p.Started())
	}
	if st := sub.answers[1]; st.Err != nil || st.Role != Primary || st.LSN != 0x3000100 || st.User != "app" {
		t.Errorf("answer on the lent connection: %+v", st)
	}
	p.Unsubscribe(sub)
	if !p.probeOnce(ctx) || len(sub.answers) != 2 || sub.lent != 1 {
		t.Errorf("after Unsubscribe: %d answers, %d lent; want no more", len(sub.answers), sub.lent)
	}
}

// TestQueryLSN: a capture runs on an idle connection a subscriber lends,
// else on the probe connection, and, before the probe connection is open,
// fails with ErrNoConn (the caller opens one of its own).
func TestQueryLSN(t *testing.T) {
	own := &fakeServer{user: "app", row: primarySeenByApp}
	sub := &fakeSubscriber{pool: &fakeServer{row: []driver.Value{"0/5000000"}}}
	p := New(Key{Timeout: time.Second}, testConfig(own))
	defer p.closeConn()
	ctx := context.Background()
	if _, _, err := p.QueryLSN(ctx, "SELECT lsn", time.Second); !errors.Is(err, ErrNoConn) {
		t.Fatalf("before the first probe: %v, want ErrNoConn", err)
	}
	p.probeOnce(ctx)
	p.Subscribe(sub)
	lsn, at, err := p.QueryLSN(ctx, "SELECT lsn", time.Second)
	if err != nil || lsn != 0x5000000 || at.IsZero() || sub.lent != 1 || len(sub.back) != 1 || sub.back[0] != nil {
		t.Fatalf("on the lent connection: %X at %v, %v; lent %d, given back %v", lsn, at, err, sub.lent, sub.back)
	}
	if p.capturedAt.Load() != at.UnixNano() {
		t.Error("a capture on a lent connection does not stand in for the primary's probe")
	}
	p.Unsubscribe(sub)
	own.row = []driver.Value{"0/6000000"}
	if lsn, _, err := p.QueryLSN(ctx, "SELECT lsn", time.Second); err != nil || lsn != 0x6000000 {
		t.Fatalf("on the probe connection: %X, %v", lsn, err)
	}
}
