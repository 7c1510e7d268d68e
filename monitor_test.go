package pgreplica

import (
	"context"
	"testing"
	"time"

	"github.com/DATA-DOG/go-sqlmock"
)

// TestMonitorIdleWhileNoStatementRuns: the monitor sees a connector idle
// (and probes at IdleMonitorInterval) only while its pools lend nothing:
// a statement that ran since its last look, or a connection lent now,
// keeps it at MonitorInterval.
func TestMonitorIdleWhileNoStatementRuns(t *testing.T) {
	mc := newMockCluster(t, 1, nil)
	mc.mocks[1].MatchExpectationsInOrder(false)
	for range 2 {
		mc.mocks[1].ExpectQuery("SELECT v FROM t").WillReturnRows(sqlmock.NewRows([]string{"v"}).AddRow(1))
	}
	ctx := WithEventual(context.Background())
	m := mc.c.mon
	var v int
	if err := mc.db.QueryRowContext(ctx, "SELECT v FROM t").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if d := m.idleFor(); d != 0 {
		t.Fatalf("idle for %v right after a statement", d)
	}
	rows, err := mc.db.QueryContext(ctx, "SELECT v FROM t")
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if d := m.idleFor(); d != 0 {
			t.Fatalf("idle for %v while rows hold a connection", d)
		}
	}
	rows.Close()
	m.idleFor() // the statement's borrow, seen once
	deadline := time.Now().Add(10 * time.Second)
	for m.idleFor() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("never idle after the rows were closed")
		}
		time.Sleep(time.Millisecond) // the condition is time passing
	}
}

// TestCaptureStandsInForThePrimarysProbe: the primary's probe is left out
// while a capture read its position within the interval and the last
// probe is younger than an idle interval; never for a replica, a failed
// host, after a stale capture or once the last probe is that old.
func TestCaptureStandsInForThePrimarysProbe(t *testing.T) {
	p := newProber("", nil, false)
	now := time.Now()
	for _, tc := range []struct {
		name     string
		st       *nodeStatus
		captured time.Duration // ago; 0: never
		probed   time.Duration // ago
		want     bool
	}{
		{"primary, fresh capture, recent probe", &nodeStatus{role: rolePrimary}, 10 * time.Millisecond, 300 * time.Millisecond, true},
		{"primary, capture older than the interval", &nodeStatus{role: rolePrimary}, 300 * time.Millisecond, 300 * time.Millisecond, false},
		{"primary, last probe an idle interval ago", &nodeStatus{role: rolePrimary}, 10 * time.Millisecond, time.Second, false},
		{"primary, never captured", &nodeStatus{role: rolePrimary}, 0, 10 * time.Millisecond, false},
		{"replica", &nodeStatus{role: roleReplica}, 10 * time.Millisecond, 10 * time.Millisecond, false},
		{"failed primary", &nodeStatus{role: rolePrimary, err: errNoProbeConn}, 10 * time.Millisecond, 10 * time.Millisecond, false},
		{"never probed", nil, 10 * time.Millisecond, 10 * time.Millisecond, false},
	} {
		p.last = tc.st
		p.capturedAt.Store(0)
		if tc.captured != 0 {
			p.capturedAt.Store(now.Add(-tc.captured).UnixNano())
		}
		if got := p.captureStandsIn(now.Add(-tc.probed), 250*time.Millisecond, time.Second); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
