package pgreplica

import (
	"context"
	"testing"

	"github.com/DATA-DOG/go-sqlmock"
)

// TestOneConnectionForOneRead: a read on a replica whose pool holds no
// connection yet opens one, not two (puddle's TryAcquire dials one in the
// background when none is idle; the hedging borrow used to try it first).
func TestOneConnectionForOneRead(t *testing.T) {
	mc := newMockCluster(t, 2, nil)
	for i := 1; i <= 2; i++ {
		mc.mocks[i].MatchExpectationsInOrder(false)
		mc.mocks[i].ExpectQuery("SELECT v FROM t").WillReturnRows(sqlmock.NewRows([]string{"v"}).AddRow(i))
		mc.mocks[i] = &lenientMock{mc.mocks[i]}
	}
	var v int
	if err := mc.db.QueryRowContext(WithEventual(context.Background()), "SELECT v FROM t").Scan(&v); err != nil {
		t.Fatal(err)
	}
	n := mc.c.nodes[v]
	if got := n.pool.pool.Stat().TotalResources(); got != 1 {
		t.Errorf("replica %d holds %d connections after one read, want 1", v, got)
	}
	if got := n.pool.idle.Load(); got != 1 {
		t.Errorf("replica %d counts %d idle connections, want 1", v, got)
	}
}
