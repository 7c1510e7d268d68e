package drivertest

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/lib/pq"
	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration/itest"
)

// Cancellation conformance: the cancellation and timeout cases of lib/pq's
// own tests (v1.12.3: conn_test.go TestContextCancelQuery,
// TestContextCancelExec, TestContextCancelBegin; issues_test.go
// TestQueryRowContext, TestQueryRowContextBad, TestQueryCancelRace,
// TestQueryCancelledReused) and of pgx's stdlib (v5.12.0: sql_test.go
// TestStmtExecContextCancel, TestBeginTxContextCancel), rewritten for the
// harness cluster, plus the router's own paths (a read on the primary, a
// hedged read, a read with its check in flight, a fallback read). Each
// runs on the inner driver alone, on the primary, and through pgreplica
// with that inner driver, and the two must end alike: a statement the
// server runs when its context ends returns the inner driver's error
// (lib/pq: the server's *pq.Error 57014; pgx: context.Canceled, or its
// timeout error for a deadline).
//
// The upstream tests open a new *sql.DB each; here the handles are warmed
// first (a connection to every node), so that the context ends while the
// server runs the statement, not while pgreplica makes a connection:
// that case (TestCancelWhileConnecting) ends in pgreplica's own error,
// which wraps the context's (docs/errors.md, "Cancellation").

// cancelCase is one upstream case: run does it on db and returns the
// error the upstream test asserts on; kill, when set, ends ctx once the
// statement runs (see cancelWhenRunning).
type cancelCase struct {
	name string
	// from is the upstream test it follows ("" for the router's own).
	from string
	run  func(t *testing.T, h *handle) error
	// racy: how it ends depends on a race either way; run asserts what
	// may come, the two handles are not compared.
	racy bool
}

// handle is a *sql.DB under test, with what a case needs to know of it.
type handle struct {
	db      *sql.DB
	inner   string // pq or pgx
	routed  bool   // through pgreplica
	app     string // application_name of its connections
	stats   *pgreplica.Connector
	tbl     string
	queries *activity
}

// TestCancelConformance runs every case on both inner drivers, alone and
// through pgreplica, and compares how each ended.
func TestCancelConformance(t *testing.T) {
	cluster.Need(t)
	act := newActivity(t)
	for _, inner := range drivers {
		t.Run(inner, func(t *testing.T) {
			alone := openAlone(t, inner, act)
			routed := openRouted(t, inner, act)
			for _, cc := range cancelCases() {
				t.Run(cc.name, func(t *testing.T) {
					a := cc.run(t, alone)
					r := cc.run(t, routed)
					t.Logf("%s alone: %s; through pgreplica: %s", inner, describe(a), describe(r))
					if ka, kr := errKind(a), errKind(r); ka != kr && !cc.racy {
						t.Errorf("%s (%s): %s alone ends in %s, through pgreplica in %s (%v)", cc.name, cc.from, inner, ka, kr, r)
					}
				})
			}
			// A connection a cancel ended is not lent again: no read met
			// one and was sent again elsewhere.
			if n := routed.stats.Stats().ConnLostRetries; n != 0 {
				t.Errorf("%s: %d reads met a connection a cancel had closed (ConnLostRetries)", routed, n)
			}
		})
	}
}

func cancelCases() []cancelCase {
	const sleep = "SELECT pg_sleep(5)"
	return []cancelCase{
		{name: "query cancelled while it runs", from: "lib/pq TestContextCancelQuery, TestQueryCancelRace", run: func(t *testing.T, h *handle) error {
			ctx := h.cancelWhenRunning(t, 1)
			var s string
			err := h.db.QueryRowContext(ctx, sleep).Scan(&s)
			h.mustBeUsable(t)
			wantInner(t, h, err, false)
			return err
		}},
		{name: "exec cancelled while it runs", from: "lib/pq TestContextCancelExec", run: func(t *testing.T, h *handle) error {
			ctx := h.cancelWhenRunning(t, 1)
			_, err := h.db.ExecContext(ctx, sleep)
			h.mustBeUsable(t)
			wantInner(t, h, err, false)
			return err
		}},
		{name: "already cancelled", from: "lib/pq TestContextCancelQuery", run: func(t *testing.T, h *handle) error {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			_, err := h.db.QueryContext(ctx, sleep)
			if err == nil || err.Error() != "context canceled" {
				t.Errorf("%s: query with a cancelled context: %v, want context canceled", h, err)
			}
			return err
		}},
		{name: "cancel after each query", from: "lib/pq TestContextCancelQuery", run: func(t *testing.T, h *handle) error {
			for range 20 {
				ctx, cancel := context.WithCancel(context.Background())
				rows, err := h.db.QueryContext(ctx, "SELECT 1")
				cancel()
				if err != nil {
					return err
				}
				if err := rows.Close(); err != nil && err != driver.ErrBadConn && err != context.Canceled {
					return err
				}
			}
			h.mustBeUsable(t)
			return nil
		}},
		{name: "prepared query past its deadline", from: "lib/pq TestQueryRowContext", run: func(t *testing.T, h *handle) error {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			st, err := h.db.PrepareContext(ctx, "SELECT pg_sleep(5) AS id")
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			var d []byte
			err = st.QueryRowContext(ctx).Scan(&d)
			dl, _ := ctx.Deadline()
			if late := time.Since(dl); late > 500*time.Millisecond {
				t.Errorf("%s: the query returned %v after its deadline", h, late)
			}
			wantInner(t, h, err, true)
			return err
		}},
		{name: "prepared exec past its deadline", from: "pgx TestStmtExecContextCancel", run: func(t *testing.T, h *handle) error {
			st, err := h.db.Prepare("INSERT INTO " + h.tbl + " (v) SELECT $1::text FROM pg_sleep(5)")
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			_, err = st.ExecContext(ctx, "42")
			h.mustBeUsable(t)
			wantInner(t, h, err, true)
			return err
		}},
		{name: "statement of a transaction cancelled while it runs", from: "lib/pq TestContextCancelBegin", run: func(t *testing.T, h *handle) error {
			ctx := h.cancelWhenRunning(t, 1)
			tx, err := h.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, err = tx.ExecContext(ctx, sleep)
			wantInner(t, h, err, false)
			// database/sql rolls the transaction back once it sees the
			// cancel; pgx closed the connection at it already.
			if _, qerr := tx.Query(sleep); qerr != sql.ErrTxDone && (h.inner == "pq" || qerr != driver.ErrBadConn) {
				t.Errorf("%s: a query in the cancelled transaction: %v, want sql.ErrTxDone", h, qerr)
			}
			if _, berr := h.db.BeginTx(ctx, nil); berr == nil || berr.Error() != "context canceled" {
				t.Errorf("%s: BeginTx with a cancelled context: %v, want context canceled", h, berr)
			}
			h.mustBeUsable(t)
			return err
		}},
		{name: "read-only transaction cancelled while it runs", run: func(t *testing.T, h *handle) error {
			ctx := h.cancelWhenRunning(t, 1)
			tx, err := h.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			var s string
			err = tx.QueryRowContext(ctx, sleep).Scan(&s)
			wantInner(t, h, err, false)
			return err
		}},
		// racy: database/sql's Commit says context.Canceled until its own
		// goroutine has rolled the transaction back, sql.ErrTxDone after;
		// which one comes is database/sql's race, whatever the driver.
		{name: "commit after a cancel", from: "pgx TestBeginTxContextCancel", racy: true, run: func(t *testing.T, h *handle) error {
			name := h.tbl + "_tx"
			ctx, cancel := context.WithCancel(context.Background())
			tx, err := h.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec("CREATE TABLE " + name + " (id serial)"); err != nil {
				t.Fatal(err)
			}
			cancel()
			err = tx.Commit()
			if err != context.Canceled && err != sql.ErrTxDone {
				t.Errorf("%s: Commit after the cancel: %v, want context.Canceled or sql.ErrTxDone", h, err)
			}
			var n int
			qerr := h.db.QueryRowContext(pgreplica.WithPrimary(context.Background()), "SELECT count(*) FROM "+name).Scan(&n)
			if code, _ := serverError(h.inner, qerr); code != "42P01" {
				t.Errorf("%s: the cancelled transaction's table: %v, want 42P01", h, qerr)
			}
			return err
		}},
		{name: "rows cancelled while scanned", from: "lib/pq TestQueryCancelledReused", run: func(t *testing.T, h *handle) error {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			rows, err := h.db.QueryContext(ctx, "SELECT generate_series(1, 10000)")
			if err != nil {
				t.Fatal(err)
			}
			var i int
			if !rows.Next() || rows.Scan(&i) != nil || i != 1 {
				t.Errorf("%s: the first row: %d, %v", h, i, rows.Err())
			}
			cancel()
			rows.Close()
			h.mustBeUsable(t)
			return nil
		}},
		{name: "cancel racing QueryRow", from: "lib/pq TestQueryRowContextBad", racy: true, run: func(t *testing.T, h *handle) error {
			var wrapped int
			for range 50 {
				ctx, cancel := context.WithCancel(context.Background())
				go cancel()
				var v int
				err := h.db.QueryRowContext(ctx, "SELECT 1").Scan(&v)
				switch code, _ := serverError(h.inner, err); {
				case err == nil, err == context.Canceled, code == "57014":
				case h.inner == "pgx" && errors.Is(err, context.Canceled) && !strings.HasPrefix(err.Error(), "pgreplica: "):
					// pgx's own: its connect, or its check of a context done
				case errors.Is(err, context.Canceled) && strings.HasPrefix(err.Error(), "pgreplica: "):
					wrapped++ // ended while pgreplica waited: its error, wrapping the context's
					if wrapped == 1 {
						t.Logf("%s: %v", h, err)
					}
				default:
					return err // driver.ErrBadConn was lib/pq issue #1062
				}
			}
			if wrapped > 0 {
				t.Logf("%s: %d of 50 ended before the statement was sent, in pgreplica's error wrapping context.Canceled (lib/pq's test compares with ==)", h, wrapped)
			}
			return nil
		}},
		{name: "read on the primary cancelled while it runs", run: func(t *testing.T, h *handle) error {
			ctx := h.cancelWhenRunning(t, 1)
			var s string
			err := h.db.QueryRowContext(pgreplica.WithPrimary(ctx), sleep).Scan(&s)
			wantInner(t, h, err, false)
			return err
		}},
		{name: "hedged read cancelled while both attempts run", run: func(t *testing.T, h *handle) error {
			hedges := func(s pgreplica.Stats) int64 { return s.Hedges }
			// A replica may be passed over by a hedge now and then (slow to
			// connect, or kept from reads until its next probe after an
			// earlier case's hedge beat it): up to three reads, until one
			// is hedged.
			var err error
			for try := range 3 {
				before := h.count(hedges)
				if h.routed {
					h.awaitReplicasTakeReads(t)
				}
				ctx := h.cancelWhenRunning(t, h.routedOr(2, 1))
				var s string
				err = h.db.QueryRowContext(pgreplica.WithEventual(ctx), sleep).Scan(&s)
				wantInner(t, h, err, false)
				if !h.routed || h.count(hedges) > before {
					break
				}
				if try == 2 {
					t.Errorf("%s: none of 3 reads was hedged (hedges denied: %d)", h, h.count(func(s pgreplica.Stats) int64 { return s.HedgesDenied }))
				}
			}
			return err
		}},
		{name: "read after a write cancelled while it runs", run: func(t *testing.T, h *handle) error {
			// pgx: its check in its flight; lib/pq: to the primary, the
			// write being too young for a replica, or after a check.
			proven := func(s pgreplica.Stats) int64 { return s.FlightChecks + s.ReplayChecks + s.RecentWriteReads }
			before := h.count(proven)
			if _, err := h.db.Exec("INSERT INTO " + h.tbl + " (v) VALUES ('w')"); err != nil {
				t.Fatal(err)
			}
			ctx := h.cancelWhenRunning(t, 1)
			var s string
			err := h.db.QueryRowContext(ctx, sleep+"::text FROM "+h.tbl+" LIMIT 1").Scan(&s)
			if h.routed && h.count(proven) == before {
				t.Errorf("%s: the read was neither checked nor sent to the primary", h)
			}
			wantInner(t, h, err, false)
			return err
		}},
		{name: "fallback read cancelled while it runs", run: func(t *testing.T, h *handle) error {
			// On the primary as a fallback, or as a read of the handle's
			// own recent write (its table's creation or an earlier case's
			// insert, whose position no read had asked for yet) that the
			// paused replicas cannot have: either way the primary runs it.
			onPrimary := func(s pgreplica.Stats) int64 { return s.FallbackReads + s.RecentWriteReads }
			before := h.count(onPrimary)
			if h.routed {
				cluster.PauseReplicas(t)
				awaitPaused(t, h.db, true)
			}
			// A position written after the pause, which no replica has.
			mustExec(t, cluster.Primary(), "INSERT INTO "+h.tbl+" (v) VALUES ('f')")
			at, err := cluster.QueryString(ctxFor(t), cluster.Primary(), "SELECT pg_current_wal_insert_lsn()::text")
			if err != nil {
				t.Fatal(err)
			}
			lsn, err := pgreplica.ParseLSN(at)
			if err != nil {
				t.Fatal(err)
			}
			ctx := h.cancelWhenRunning(t, 1)
			var s string
			err = h.db.QueryRowContext(pgreplica.WithMinLSN(ctx, lsn), sleep).Scan(&s)
			if h.routed && h.count(onPrimary) == before {
				t.Errorf("%s: the read did not fall back to the primary", h)
			}
			wantInner(t, h, err, false)
			return err
		}},
	}
}

// wantInner fails t unless err is what the inner driver returns for a
// statement whose context ended while the server ran it: lib/pq's
// *pq.Error 57014 (its cancel request reached the server), pgx's
// context.Canceled or, past a deadline, its timeout error.
func wantInner(t *testing.T, h *handle, err error, deadline bool) {
	t.Helper()
	switch code, _ := serverError(h.inner, err); {
	case h.inner == "pq" && code == "57014":
	case h.inner == "pgx" && deadline && pgconn.Timeout(err):
	case h.inner == "pgx" && !deadline && err == context.Canceled:
	default:
		t.Errorf("%s: %s, want the inner driver's own error", h, describe(err))
	}
}

// errKind names what a caller can tell of err: the inner driver's
// server error and its code, pgx's timeout, the context's error bare or
// wrapped, database/sql's sentinels.
func errKind(err error) string {
	var pe *pq.Error
	var ge *pgconn.PgError
	switch {
	case err == nil:
		return "no error"
	case errors.As(err, &pe):
		return "*pq.Error " + string(pe.Code)
	case errors.As(err, &ge):
		return "*pgconn.PgError " + ge.Code
	case pgconn.Timeout(err):
		return "pgconn timeout"
	case err == context.Canceled, err == context.DeadlineExceeded, err == sql.ErrTxDone, err == driver.ErrBadConn:
		return err.Error()
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "an error wrapping the context's"
	}
	return fmt.Sprintf("%T", err)
}

func describe(err error) string {
	if err == nil {
		return "no error"
	}
	return fmt.Sprintf("%s (%v)", errKind(err), err)
}

func (h *handle) String() string {
	if h.routed {
		return h.inner + " through pgreplica"
	}
	return h.inner + " alone"
}

// routedOr returns routed for the pgreplica handle, alone for the other.
func (h *handle) routedOr(routed, alone int) int {
	if h.routed {
		return routed
	}
	return alone
}

// awaitReplicasTakeReads waits until the connector sends reads to every
// replica.
func (h *handle) awaitReplicasTakeReads(t *testing.T) {
	t.Helper()
	err := itest.WaitFor(ctxFor(t), "every replica to take reads", func() (bool, string) {
		n := 0
		for _, ns := range h.stats.Nodes() {
			if ns.Role == pgreplica.RoleReplica && ns.Reads {
				n++
			}
		}
		return n == len(replicaNodes()), fmt.Sprintf("%d replicas take reads", n)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// count reads one of the connector's counters (0 for the inner driver
// alone).
func (h *handle) count(f func(pgreplica.Stats) int64) int64 {
	if h.stats == nil {
		return 0
	}
	return f(h.stats.Stats())
}

// mustBeUsable fails t unless the handle serves a statement after a
// cancel, on a connection of its own (lib/pq's connIsValid, pgx's
// ensureDBValid).
func (h *handle) mustBeUsable(t *testing.T) {
	t.Helper()
	ctx := ctxFor(t)
	conn, err := h.db.Conn(ctx)
	if err != nil {
		t.Fatalf("%s: no connection after a cancel: %v", h, err)
	}
	defer conn.Close()
	if err := conn.PingContext(ctx); err != nil {
		t.Errorf("%s: Ping after a cancel: %v", h, err)
	}
	var one int
	if err := conn.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Errorf("%s: a query after a cancel: %d, %v", h, one, err)
	}
}

var appSeq atomic.Int64

// openAlone opens the inner driver alone on the primary.
func openAlone(t *testing.T, inner string, act *activity) *handle {
	h := &handle{inner: inner, app: fmt.Sprintf("pgr_cancel_%d", appSeq.Add(1)), queries: act}
	name := map[string]string{"pq": "postgres", "pgx": "pgx"}[inner]
	db, err := sql.Open(name, cluster.NodeDSN(cluster.Primary())+"&application_name="+h.app)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	h.db = db
	h.tbl = table(t, h.db)
	warmUp(t, h)
	return h
}

// openRouted opens pgreplica with the inner driver.
func openRouted(t *testing.T, inner string, act *activity) *handle {
	h := &handle{inner: inner, routed: true, app: fmt.Sprintf("pgr_cancel_%d", appSeq.Add(1)), queries: act}
	// Every read slow to answer is hedged (no budget): the cases run
	// the hedged path too.
	h.db, h.stats = itest.Open(t, cluster.DSN()+"&pgreplica_driver="+inner+"&tuning_max_hedge_percent=100&application_name="+h.app)
	h.tbl = table(t, h.db)
	warmUp(t, h)
	return h
}

// warmUp leaves the handle a connection to every node it uses: reads
// at once, so that each replica's pool makes one.
func warmUp(t *testing.T, h *handle) {
	t.Helper()
	ctx := ctxFor(t)
	if err := cluster.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 8)
	for range cap(errs) {
		go func() {
			_, err := h.db.ExecContext(pgreplica.WithEventual(ctx), "SELECT pg_sleep(0.05)")
			if err == nil {
				var s string
				err = h.db.QueryRowContext(pgreplica.WithEventual(ctx), "SELECT pg_sleep(0.05)::text").Scan(&s)
			}
			errs <- err
		}()
	}
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Fatalf("%s: warming up: %v", h, err)
		}
	}
}

// activity watches pg_stat_activity on every node.
type activity struct {
	dbs []*sql.DB
}

func newActivity(t *testing.T) *activity {
	a := &activity{}
	for i := range cluster.Len() {
		db, err := sql.Open("pgx", cluster.NodeDSN(i)+"&application_name=pgr_cancel_watch")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		a.dbs = append(a.dbs, db)
	}
	return a
}

// running counts the statements of application app that sleep now (in
// pg_sleep: past their parse, which pgx's describe shows as active too),
// on every node, begun since since.
func (a *activity) running(ctx context.Context, app string, since time.Time) (int, error) {
	total := 0
	for _, db := range a.dbs {
		var n int
		err := db.QueryRowContext(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event = 'PgSleep' "+
			"AND query LIKE '%pg_sleep(5)%' AND query_start >= $2", app, since).Scan(&n)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

// cancelWhenRunning returns a context that ends once n statements of the
// handle sleep on the servers (pg_stat_activity shows them), and at the
// latest after 4 s, before pg_sleep(5) would end on its own.
func (h *handle) cancelWhenRunning(t *testing.T, n int) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	t.Cleanup(cancel)
	since := time.Now()
	go func() {
		defer cancel()
		for ctx.Err() == nil {
			got, err := h.queries.running(ctx, h.app, since)
			if err != nil || got >= n {
				return
			}
			time.Sleep(2 * time.Millisecond) // polling the servers' view, not waiting for time to pass
		}
	}()
	return ctx
}

// TestCancelWhileConnecting: lib/pq's TestContextCancelQuery as written,
// on a new handle: the cancel comes 10 ms after the query starts. lib/pq
// alone connects (it honours the context only while dialling) and sends
// the statement, which the server cancels; through pgreplica the first
// read on a replica may still wait for that replica's first connection,
// (or for a replica to replay the process's last write, an earlier
// test's), and then ends in pgreplica's error, which names the wait and
// wraps context.Canceled. Either is accepted; the log says which came.
func TestCancelWhileConnecting(t *testing.T) {
	cluster.Need(t)
	for _, inner := range drivers {
		t.Run(inner, func(t *testing.T) {
			db, _ := openDSN(t, cluster.DSN(), "pgreplica_driver="+inner) // pinged: the replicas' pools are empty
			ctx, cancel := context.WithCancel(context.Background())
			defer time.AfterFunc(10*time.Millisecond, cancel).Stop()
			var s string
			err := db.QueryRowContext(ctx, "SELECT pg_sleep(1)").Scan(&s)
			code, _ := serverError(inner, err)
			switch {
			case inner == "pq" && code == "57014", inner == "pgx" && err == context.Canceled:
				t.Logf("the statement was sent, and ended in the inner driver's error: %v", err)
			case errors.Is(err, context.Canceled) && strings.HasPrefix(err.Error(), "pgreplica: ") && strings.Contains(err.Error(), "waited "):
				// Waiting for a connection, or for a replica to replay
				// the process's last write (an earlier test's).
				t.Logf("the cancel came before the statement was sent: %v", err)
			default:
				t.Errorf("%s: %s, want the inner driver's error or pgreplica's naming its wait", inner, describe(err))
			}
		})
	}
}
