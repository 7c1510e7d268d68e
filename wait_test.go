package pgreplica

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/DATA-DOG/go-sqlmock"

	"github.com/pgreplica/pgreplica/internal/lagtrack"
)

// TestFutileWaitPrediction: a wait no replica is predicted to end before
// the deadline is not started; without a prediction the read waits.
func TestFutileWaitPrediction(t *testing.T) {
	now := time.Now()
	budget := 150 * time.Millisecond
	cases := []struct {
		name         string
		delay        time.Duration
		rate         float64
		paused       bool
		backlog      bool          // WAL received and not replayed at the last probe
		sampled      time.Duration // how long ago the replica was probed
		smallBacklog bool          // the backlog is 352 bytes
		need         LSN
		passedAt     time.Duration // how long ago the primary reached 2000 (0: just now)
		futile       bool
	}{
		{name: "apply delay beyond the budget", delay: 300 * time.Millisecond, need: 5000, futile: true},
		{name: "apply delay within the budget", delay: 100 * time.Millisecond, need: 5000},
		{name: "apply delay long since served", delay: 300 * time.Millisecond, need: 1500, passedAt: time.Second},
		// The primary sits on its last write's position: nothing passed it,
		// but it was reached a second ago, and applied since.
		{name: "an idle primary's last write, applied long since", delay: 300 * time.Millisecond, need: 2000, passedAt: time.Second},
		{name: "an idle primary's last write, written just now", delay: 300 * time.Millisecond, need: 2000, futile: true},
		// Its probe saw it past the position: a delay raised since
		// applies to later commits.
		{name: "apply delay beyond the budget, the position replayed at the probe", delay: 300 * time.Millisecond, need: 900},
		{name: "paused, the position replayed at the probe", paused: true, need: 900},
		{name: "idle replica: no rate, no prediction", need: 5000},
		{name: "far behind at its replay rate", rate: 1 << 20, backlog: true, need: 10 << 20, futile: true},
		{name: "a little behind at its replay rate", rate: 1 << 20, backlog: true, need: 2000},
		{name: "far behind at its replay rate when probed long enough ago to have caught up", rate: 1 << 20, backlog: true, sampled: 20 * time.Second, need: 10 << 20},
		{name: "a few records in flight are no backlog, whatever the rate", rate: 1000, backlog: true, smallBacklog: true, need: 5000},
		{name: "a slow rate without a backlog is the primary's, not the replica's", rate: 100, need: 5000},
		{name: "paused: cannot serve it until a probe shows it resumed", paused: true, need: 5000, futile: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &router{}
			c.primaryLSNs.Add(now.Add(-2*time.Second), 1000)
			c.primaryLSNs.Add(now.Add(-tc.passedAt), 2000)
			top := snapshot(spec{role: rolePrimary}, spec{role: roleReplica, replay: 1000})
			st := &top.nodes[1].status
			st.applyDelay, st.replayRate, st.paused = tc.delay, tc.rate, tc.paused
			st.lsn, st.at = 1000, now.Add(-tc.sampled)
			if tc.backlog {
				st.receive = 20 << 20
			}
			if tc.smallBacklog {
				st.receive = st.lsn + 352
			}
			pl := plan{topo: top, need: tc.need, deadline: now.Add(budget)}
			if got, _ := c.futile(context.Background(), &pl); got != tc.futile {
				t.Errorf("futile = %v, want %v", got, tc.futile)
			}
		})
	}
}

// TestFutileWithAPausedReplica: a paused replica proves nothing about the
// others: the wait is predicted from them (issue: one replica paused, the
// other 200 ms behind, made every read after a write wait its budget).
func TestFutileWithAPausedReplica(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name   string
		delay  time.Duration // of the replica that is not paused
		futile bool
	}{
		{"the other applies 200 ms late, beyond the budget", 200 * time.Millisecond, true},
		{"the other applies within the budget", 50 * time.Millisecond, false},
		{"the other is an endpoint: its probe's delay is one server's", -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &router{}
			c.primaryLSNs.Add(now, 2000)
			top := snapshot(spec{role: rolePrimary}, spec{role: roleReplica, replay: 1000}, spec{role: roleReplica, replay: 1000})
			top.nodes[1].status.paused = true
			top.nodes[2].status.applyDelay = tc.delay
			if tc.delay < 0 {
				top.nodes[2].status.applyDelay = time.Hour
				top.nodes[2].n.endpoint.Store(true)
			}
			pl := plan{topo: top, need: 2000, deadline: now.Add(150 * time.Millisecond)}
			if got, _ := c.futile(context.Background(), &pl); got != tc.futile {
				t.Errorf("futile = %v, want %v", got, tc.futile)
			}
		})
	}
}

// TestReadOnlyTxFallbackTakesASlotAndCounts: a read-only transaction that
// falls back to the primary is a fallback read like any other: it holds
// one of the fallback slots for its whole life and is counted.
func TestReadOnlyTxFallbackTakesASlotAndCounts(t *testing.T) {
	mc := newMockCluster(t, 1, func(c *Config) { c.MaxConnsPerHost = 2 })
	// A write the replica (known at 0/100) has not replayed.
	mc.mocks[0].ExpectExec("UPDATE t SET x = 1").WillReturnResult(sqlmock.NewResult(0, 1))
	mc.expectLSNCapture(0, "0/900")
	if _, err := mc.db.Exec("UPDATE t SET x = 1"); err != nil {
		t.Fatal(err)
	}
	mc.settle()
	mc.mocks[1].MatchExpectationsInOrder(false)
	for range 100 {
		mc.mocks[1].ExpectQuery(replaySQL).WillReturnRows(sqlmock.NewRows([]string{"lsn"}).AddRow("0/100"))
	}
	mc.mocks[1] = &lenientMock{mc.mocks[1]}

	mc.mocks[0].ExpectBegin()
	tx, err := mc.db.BeginTx(context.Background(), &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := mc.c.Stats().FallbackReads; got != 1 {
		t.Errorf("FallbackReads %d after a read-only transaction fell back, want 1", got)
	}
	// The transaction holds the only slot: another fallback is refused.
	_, err = mc.db.BeginTx(context.Background(), &sql.TxOptions{ReadOnly: true})
	if !errors.Is(err, ErrFallbackLimit) {
		t.Fatalf("second fallback while the first transaction runs: %v, want ErrFallbackLimit", err)
	}
	mc.mocks[0].ExpectRollback()
	mc.mocks[0] = &lenientMock{mc.mocks[0]}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
}

// TestReplicasLatePrediction: a read after a write of its process goes
// to the primary (ReadAfterWritePrimary) only when no replica is
// predicted to have the write sooner than the primary would answer; with
// no flight to carry its check it keeps the young-write rule.
func TestReplicasLatePrediction(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name         string
		lag, delay   time.Duration // the replica's measured time lag and apply delay
		age          time.Duration // of the write
		beside, late bool
		endpoint     bool
		paused       bool
	}{
		{name: "caught up, a write of a moment ago", age: 50 * time.Microsecond, beside: true},
		{name: "lagging 50 ms, a write of a moment ago", lag: 50 * time.Millisecond, age: 50 * time.Microsecond, beside: true, late: true},
		{name: "lagging 50 ms, a write of 60 ms ago", lag: 50 * time.Millisecond, age: 60 * time.Millisecond, beside: true},
		{name: "apply delay 300 ms, lag not measured yet", delay: 300 * time.Millisecond, age: time.Millisecond, beside: true, late: true},
		{name: "caught up but paused", age: 50 * time.Millisecond, beside: true, paused: true, late: true},
		{name: "an endpoint whose probe's server is paused", age: time.Millisecond, beside: true, endpoint: true, paused: true},
		{name: "an endpoint whose probe's server applies 300 ms late", delay: 300 * time.Millisecond, age: time.Millisecond, beside: true, endpoint: true},
		{name: "no flight: a write younger than youngWrite", age: time.Millisecond, late: true},
		{name: "no flight: an older write", age: 2 * youngWrite},
	} {
		t.Run(tc.name, func(t *testing.T) {
			top := snapshot(spec{role: rolePrimary}, spec{role: roleReplica, replay: 1000})
			top.nodes[0].n.observeRTT(200 * time.Microsecond)
			top.nodes[1].lag, top.nodes[1].status.applyDelay = tc.lag, tc.delay
			top.nodes[1].n.endpoint.Store(tc.endpoint)
			top.nodes[1].status.paused = tc.paused
			pl := plan{topo: top, read: true, pendingWriteAt: now.Add(-tc.age)}
			if got := pl.replicasLate(tc.beside, now, new(lagtrack.Tracker)); got != tc.late {
				t.Errorf("replicasLate = %v, want %v", got, tc.late)
			}
		})
	}
}
