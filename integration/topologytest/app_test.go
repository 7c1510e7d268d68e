package topologytest

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration"
)

// app is a program-like client of a cluster: one loop inserts a row with a
// fresh sequence number every 10 ms, another reads every 10 ms, alternating
// a read-your-writes read of the highest sequence number (through the
// writer's Session) with an eventual read. It records every call.
type app struct {
	db    *sql.DB
	c     *integration.Cluster
	table string
	sess  *pgreplica.Session

	issued atomic.Int64 // highest seq handed to a write
	acked  atomic.Int64 // highest seq whose write returned nil

	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	writes []writeOp
	reads  []readOp
}

// Write outcomes.
const (
	wrOK      = "ok"
	wrUnknown = "outcome unknown"   // ErrWriteOutcomeUnknown
	wrRefused = "refused"           // ErrNoPrimary, ErrSplitBrain, ErrNoReachableHost: never sent
	wrConnect = "connect failed"    // could not connect: never sent
	wrOther   = "other (ambiguous)" // anything else
)

type writeOp struct {
	start, end time.Time
	seq        int64
	err        error
	outcome    string
}

type readOp struct {
	start, end time.Time
	session    bool  // read-your-writes read (else eventual)
	need       int64 // session reads: highest seq acknowledged before the read
	got        int64 // session reads: max(seq) the read saw
	node       int
	err        error
}

func startApp(db *sql.DB, c *integration.Cluster, table string) *app {
	stop, cancel := context.WithCancel(context.Background())
	a := &app{db: db, c: c, table: table, sess: pgreplica.NewSession(), cancel: cancel}
	a.wg.Add(2)
	go a.writeLoop(stop)
	go a.readLoop(stop)
	return a
}

// every calls f every 10 ms until stop ends. A call under way when stop
// ends completes: its outcome is recorded like any other.
func every(stop context.Context, f func()) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		f()
		select {
		case <-stop.Done():
			return
		case <-tick.C:
		}
	}
}

func (a *app) writeLoop(stop context.Context) {
	defer a.wg.Done()
	sctx := pgreplica.WithSession(context.Background(), a.sess)
	every(stop, func() {
		op := writeOp{start: time.Now(), seq: a.issued.Add(1)}
		wctx, cancel := context.WithTimeout(sctx, 3*time.Second)
		_, op.err = a.db.ExecContext(wctx, "INSERT INTO "+a.table+" (seq) VALUES ($1)", op.seq)
		cancel()
		op.end = time.Now()
		op.outcome = classifyWrite(op.err)
		if op.err == nil {
			for cur := a.acked.Load(); op.seq > cur && !a.acked.CompareAndSwap(cur, op.seq); cur = a.acked.Load() {
			}
		}
		a.mu.Lock()
		a.writes = append(a.writes, op)
		a.mu.Unlock()
	})
}

func classifyWrite(err error) string {
	var ce *pgconn.ConnectError
	switch {
	case err == nil:
		return wrOK
	case errors.Is(err, pgreplica.ErrWriteOutcomeUnknown):
		return wrUnknown
	case errors.Is(err, pgreplica.ErrNoPrimary), errors.Is(err, pgreplica.ErrSplitBrain), errors.Is(err, pgreplica.ErrNoReachableHost):
		return wrRefused
	case errors.As(err, &ce):
		return wrConnect
	}
	return wrOther
}

// typedReadError reports an error the driver documents for a read it could
// not place: the caller can branch on it.
func typedReadError(err error) bool {
	for _, e := range []error{pgreplica.ErrNoPrimary, pgreplica.ErrNoFreshReplica, pgreplica.ErrNoReplica,
		pgreplica.ErrNoReachableHost, pgreplica.ErrSplitBrain} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func (a *app) readLoop(stop context.Context) {
	defer a.wg.Done()
	sctx := pgreplica.WithSession(context.Background(), a.sess)
	ev := pgreplica.WithEventual(context.Background())
	session := false
	every(stop, func() {
		session = !session
		op := readOp{start: time.Now(), session: session, node: -1}
		if session {
			op.need = a.acked.Load()
			rctx, cancel := context.WithTimeout(sctx, 3*time.Second)
			var port int
			op.err = a.db.QueryRowContext(rctx, "SELECT coalesce(max(seq), 0), inet_server_port() FROM "+a.table).Scan(&op.got, &port)
			cancel()
			op.node = a.c.NodeAt(port)
		} else {
			rctx, cancel := context.WithTimeout(ev, 3*time.Second)
			op.node, op.err = servedBy(rctx, a.db, a.c)
			cancel()
		}
		op.end = time.Now()
		a.mu.Lock()
		a.reads = append(a.reads, op)
		a.mu.Unlock()
	})
}

// stop ends both loops.
func (a *app) stop() {
	a.cancel()
	a.wg.Wait()
}

// firstWrite returns the first write that ended after t with outcome o.
func (a *app) firstWrite(after time.Time, outcome string) (writeOp, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, w := range a.writes {
		if w.end.After(after) && w.outcome == outcome {
			return w, true
		}
	}
	return writeOp{}, false
}

// firstRead returns the first successful read served by node i that
// started after t.
func (a *app) firstRead(after time.Time, node int) (readOp, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range a.reads {
		if r.start.After(after) && r.err == nil && r.node == node {
			return r, true
		}
	}
	return readOp{}, false
}

// history returns copies of what the loops recorded.
func (a *app) history() ([]writeOp, []readOp) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]writeOp(nil), a.writes...), append([]readOp(nil), a.reads...)
}
