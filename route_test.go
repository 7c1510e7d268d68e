package pgreplica

import (
	"context"
	"testing"

	"github.com/DATA-DOG/go-sqlmock"
)

// TestSessionReadsStayOnTheirReplica: a session's reads keep to the
// replica of its last read (affinity), where replay only moves forward,
// so they need no bound on the previous read and cost one statement each,
// while reads without a session spread round robin (in turns of
// turnReads reads each, read one at a time).
func TestSessionReadsStayOnTheirReplica(t *testing.T) {
	mc := newMockCluster(t, 2, nil)
	mc.mocks[1].MatchExpectationsInOrder(false)
	mc.mocks[2].MatchExpectationsInOrder(false)
	ctx := WithSession(context.Background(), NewSession())
	for range 4 + 2*turnReads {
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
	for range 2 * turnReads {
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

// TestReadThatCannotFlyGoesBack: a read for a position no replica is
// known to have is borrowed a replica to carry its check in its own
// flight; where no flight is possible (this inner driver is not pgx), it
// goes back to acquire's decision, which proves a replica with a replay
// check, and runs there, counted once: a replica read, a tokened read, no
// check in flight.
func TestReadThatCannotFlyGoesBack(t *testing.T) {
	mc := newMockCluster(t, 1, nil)
	if !mc.c.flights {
		t.Fatal("the mock cluster's reads may not fly: the case needs them to try")
	}
	mc.set(0, rolePrimary, 0x900)
	mc.refresh()
	mc.mocks[1].MatchExpectationsInOrder(false)
	mc.expectReplayChecks(1, "0/900")
	mc.mocks[1].ExpectQuery("SELECT x FROM t").WillReturnRows(sqlmock.NewRows([]string{"x"}).AddRow(1))
	mc.mocks[1] = &lenientMock{mc.mocks[1]}
	before := mc.c.Stats()
	var x int
	if err := mc.db.QueryRowContext(WithMinLSN(context.Background(), 0x800), "SELECT x FROM t").Scan(&x); err != nil {
		t.Fatal(err)
	}
	after := mc.c.Stats()
	for _, d := range []struct {
		what      string
		got, want int64
	}{
		{"ReplicaReads", after.ReplicaReads - before.ReplicaReads, 1},
		{"PrimaryReads", after.PrimaryReads - before.PrimaryReads, 0},
		{"FallbackReads", after.FallbackReads - before.FallbackReads, 0},
		{"TokenedReads", after.TokenedReads - before.TokenedReads, 1},
		{"ReplayChecks", after.ReplayChecks - before.ReplayChecks, 1},
		{"FlightChecks", after.FlightChecks - before.FlightChecks, 0},
	} {
		if d.got != d.want {
			t.Errorf("%s rose by %d, want %d", d.what, d.got, d.want)
		}
	}
}
