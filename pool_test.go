package pgreplica

import (
	"context"
	"testing"
	"time"

	"github.com/DATA-DOG/go-sqlmock"

	"github.com/pgreplica/pgreplica/internal/monoclock"
	"github.com/pgreplica/pgreplica/internal/sockpeek"
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
	n := mc.c.nodeList()[v]
	if got := n.pool.pool.Stat().TotalResources(); got != 1 {
		t.Errorf("replica %d holds %d connections after one read, want 1", v, got)
	}
	if got := n.pool.idle.Load(); got != 1 {
		t.Errorf("replica %d counts %d idle connections, want 1", v, got)
	}
}

// TestStatementWaitsForTheMonitorsConnection: while the monitor runs a
// probe on the pool's one idle connection, a statement waits for it to
// come back instead of making the pool dial a second one; the monitor's
// borrow is no evidence of statements.
func TestStatementWaitsForTheMonitorsConnection(t *testing.T) {
	mc, hp := primaryWithOneIdle(t)
	lentBefore, _ := hp.statementStat()
	res := hp.lendIdle()
	if res == nil {
		t.Fatal("the pool's idle connection was not lent to the monitor")
	}
	if lent, inUse := hp.statementStat(); lent != lentBefore || inUse {
		t.Errorf("the monitor's borrow reads as statements: lent %d (before %d), in use %v", lent, lentBefore, inUse)
	}
	statementWaitsFor(t, mc, hp, func() { hp.giveBack(res, nil) })
}

// TestReapKeepsTheNewestConnectionFirst: the monitor's look at the idle
// connections (after every probe) leaves them in the order statements
// take them, newest first; it used to reverse it, so that after a probe
// a statement got the pool's coldest connection (a ping past
// health_check_after, and its statements prepared again).
func TestReapKeepsTheNewestConnectionFirst(t *testing.T) {
	mc := newMockCluster(t, 2, nil)
	hp := mc.c.nodeList()[0].pool
	ctx := context.Background()
	older, err := hp.acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	newer, err := hp.acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	newest := newer.Value()
	hp.release(older, nil)
	hp.release(newer, nil)
	hp.reap()
	got, err := hp.acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hp.release(got, nil)
	if got.Value() != newest {
		t.Error("after reap the pool lent its older idle connection, want the newest")
	}
}

// TestMonitorMakesNoStatementDial: the monitor's looks at the idle
// connections (reap, after every probe) and its borrows (lendIdle) never
// leave a statement to find the pool empty for a moment, which made
// puddle dial one more connection: the round trips of its start-up
// showed in TestRoundTrips on a fast machine.
func TestMonitorMakesNoStatementDial(t *testing.T) {
	_, hp := primaryWithOneIdle(t)
	ctx := context.Background()
	stop := make(chan struct{})
	monitorDone := make(chan struct{})
	go func() {
		defer close(monitorDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			hp.reap()
			if res := hp.lendIdle(); res != nil {
				hp.giveBack(res, nil)
			}
		}
	}()
	for range 20000 {
		res, err := hp.acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		hp.release(res, nil)
	}
	close(stop)
	<-monitorDone
	if got := hp.pool.Stat().TotalResources(); got != 1 {
		t.Errorf("the primary holds %d connections after statements one at a time beside the monitor, want 1", got)
	}
}

// primaryWithOneIdle returns a mock cluster whose primary's pool holds
// one idle connection, after an INSERT (1); INSERT (2) is expected next.
func primaryWithOneIdle(t *testing.T) (*mockCluster, *hostPool) {
	mc := newMockCluster(t, 2, nil)
	mc.mocks[0].MatchExpectationsInOrder(false)
	mc.mocks[0].ExpectExec("INSERT INTO t VALUES (1)").WillReturnResult(sqlmock.NewResult(0, 1))
	mc.mocks[0].ExpectExec("INSERT INTO t VALUES (2)").WillReturnResult(sqlmock.NewResult(0, 1))
	mc.mocks[0] = &lenientMock{mc.mocks[0]}
	if _, err := mc.db.ExecContext(context.Background(), "INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	return mc, mc.c.nodeList()[0].pool
}

// statementWaitsFor runs INSERT (2) while the monitor holds, or is about
// to take, the primary's one idle connection, and checks that it waits
// until release runs and then uses that connection: without the wait it
// dials a second one and is done in microseconds.
func statementWaitsFor(t *testing.T, mc *mockCluster, hp *hostPool, release func()) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := mc.db.ExecContext(context.Background(), "INSERT INTO t VALUES (2)")
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("the statement ran while the monitor held the pool's connection (%v)", err)
	case <-time.After(50 * time.Millisecond):
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := hp.pool.Stat().TotalResources(); got != 1 {
		t.Errorf("the primary holds %d connections, want 1: the statement waited for the monitor's", got)
	}
}

// endedWire is a connection's wire whose look at the socket finds it
// ended by the server, and counts the looks.
type endedWire struct {
	wire
	looks int
}

func (w *endedWire) live(*sockpeek.Sockets) bool { w.looks++; return false }

// TestReadTrustsAConnectionThatJustAnswered: a read takes an idle
// connection given back within answeredAgo without looking at its socket
// (a system call on every read); a write always looks; and once a
// connection of the connector was found lost, a read looks at every
// connection given back before that, so that the retry of a read that
// met a server's mass termination does not meet it again.
func TestReadTrustsAConnectionThatJustAnswered(t *testing.T) {
	mc := newMockCluster(t, 2, nil)
	ctx := context.Background()
	hp := mc.c.nodeList()[1].pool
	hp.trustAnswered = time.Minute // a loaded machine's pause is no look
	ended := &endedWire{}
	give := func() *physical {
		t.Helper()
		res, err := hp.acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		p := res.Value()
		if ended.wire == nil {
			ended.wire = p.wire
		}
		p.wire = ended
		hp.release(res, nil) // answered just now
		return p
	}

	p := give()
	res, ok := hp.tryAcquire(ctx, time.Second)
	if !ok || res.Value() != p || ended.looks != 0 {
		t.Fatalf("a read right after the connection answered: got it %v (same %v), %d looks; want it, without a look",
			ok, ok && res.Value() == p, ended.looks)
	}
	hp.release(res, nil)
	if res, err := hp.acquireRead(ctx); err != nil || res.Value() != p || ended.looks != 0 {
		t.Fatalf("a read's borrow that may wait: %v, %d looks; want the connection, without a look", err, ended.looks)
	} else {
		hp.release(res, nil)
	}

	// A write looks, and leaves the ended connection.
	res, err := hp.acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Value() == p || ended.looks != 1 {
		t.Errorf("a write took the connection without a look (%d looks)", ended.looks)
	}
	hp.release(res, nil)

	// A lost connection seen elsewhere makes the next read look.
	p = give()
	looks := ended.looks
	mc.c.nodeList()[0].pool.noteLost()
	if res, ok := hp.tryAcquire(ctx, time.Second); ok {
		if res.Value() == p {
			t.Error("after a lost connection a read took one given back before it without a look")
		}
		hp.release(res, nil)
	}
	if ended.looks != looks+1 {
		t.Errorf("after a lost connection: %d looks at the connection given back before it, want 1", ended.looks-looks)
	}

	// Given back long enough ago, it is looked at too.
	p = give()
	p.returned -= monoclock.Time(hp.trustAnswered)
	looks = ended.looks
	if res, ok := hp.tryAcquire(ctx, time.Second); ok {
		hp.release(res, nil)
	}
	if ended.looks != looks+1 {
		t.Errorf("a connection idle for %v: %d looks, want 1", hp.trustAnswered, ended.looks-looks)
	}
}
