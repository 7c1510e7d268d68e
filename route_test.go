package pgreplica

import (
	"context"
	"testing"

	"github.com/DATA-DOG/go-sqlmock"
)

// TestSessionReadsStayOnTheirReplica: a session's reads keep to the
// replica of its last read (affinity), where replay only moves forward,
// so they need no bound on the previous read and cost one statement each,
// while reads without a session spread round robin.
func TestSessionReadsStayOnTheirReplica(t *testing.T) {
	mc := newMockCluster(t, 2, nil)
	mc.mocks[1].MatchExpectationsInOrder(false)
	mc.mocks[2].MatchExpectationsInOrder(false)
	ctx := WithSession(context.Background(), NewSession())
	for range 8 {
		mc.mocks[1].ExpectQuery("SELECT v FROM t").WillReturnRows(sqlmock.NewRows([]string{"v"}).AddRow(1))
		mc.mocks[2].ExpectQuery("SELECT v FROM t").WillReturnRows(sqlmock.NewRows([]string{"v"}).AddRow(2))
	}
	mc.mocks[1], mc.mocks[2] = &lenientMock{mc.mocks[1]}, &lenientMock{mc.mocks[2]}
	seen := map[int]int{}
	for range 4 {
		var v int
		if err := mc.db.QueryRowContext(ctx, "SELECT v FROM t").Scan(&v); err != nil {
			t.Fatal(err)
		}
		seen[v]++
	}
	if len(seen) != 1 {
		t.Errorf("a session's reads went to replicas %v, want one", seen)
	}
	for range 4 {
		var v int
		if err := mc.db.QueryRow("SELECT v FROM t").Scan(&v); err != nil {
			t.Fatal(err)
		}
		seen[v]++
	}
	if len(seen) != 2 {
		t.Errorf("reads without a session went to %v, want both replicas", seen)
	}
}

// TestPendingPositionReadForAccessors: right after a write, before any
// capture ran, the session's accessors read the pending position rather
// than report none (a job enqueued then must carry the write).
func TestPendingPositionReadForAccessors(t *testing.T) {
	mc := newMockCluster(t, 1, nil)
	sess := NewSession()
	mc.mocks[0].ExpectExec("UPDATE t SET x = 1").WillReturnResult(sqlmock.NewResult(0, 1))
	mc.expectLSNCapture(0, "0/800")
	if _, err := mc.db.ExecContext(WithSession(context.Background(), sess), "UPDATE t SET x = 1"); err != nil {
		t.Fatal(err)
	}
	if got := sess.LSNFor(0); got != 0x800 {
		t.Fatalf("LSNFor(0) right after the write = %s, want 0/800", got)
	}
	if got := sess.LSNFor(mc.sysid); got != 0x800 {
		t.Fatalf("LSNFor(cluster) = %s, want 0/800", got)
	}
}
