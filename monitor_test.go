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
