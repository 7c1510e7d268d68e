package bench

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration/itest"
	"github.com/pgreplica/pgreplica/pgreplicapgx"
)

// TestGuardedReadRoundTrips: a session read that needs a write no replica
// is known to have (the monitor looks once an hour here, so what the
// router knows of the replicas' replay is older than every write) costs
// the pgx-native handle the round trips the same read costs a
// pgxpool.Pool of that replica: the replay check rides in the read's own
// flight. A query and a batch of reads take one round trip, a read-only
// transaction three (BEGIN with the check, the query, COMMIT). Through
// database/sql with pgx inside, a query takes one round trip too, as
// pgx's stdlib on that replica (replaycheck.go); lib/pq checks first, one
// more.
func TestGuardedReadRoundTrips(t *testing.T) {
	cluster.Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ep, proxies := countingEndpoints(t)
	createTable(t, rtTable)
	// Hedging off: a hedge is a bounded second send by design, not the
	// cost of a read (see TestRoundTrips).
	h := pinged(t, itest.NewPgx, ep.clusterDSN()+"&tuning_monitor_interval=1h&tuning_hedge_delay=-1s&application_name=pgreplica_guard")
	sel := "SELECT v FROM " + rtTable + " WHERE id = $1"
	for _, read := range []struct {
		name  string
		trips int // pgxpool's
		run   func(ctx context.Context, id int64) (string, error)
	}{
		{"query", 1, func(ctx context.Context, id int64) (v string, err error) {
			return v, h.QueryRow(ctx, sel, id).Scan(&v)
		}},
		{"batch", 1, func(ctx context.Context, id int64) (v string, err error) {
			b := &pgx.Batch{}
			b.Queue(sel, id).QueryRow(func(r pgx.Row) error { return r.Scan(&v) })
			b.Queue("SELECT 1")
			return v, h.SendBatch(ctx, b).Close()
		}},
		{"read-only transaction", 3, func(ctx context.Context, id int64) (v string, err error) {
			tx, err := h.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
			if err != nil {
				return "", err
			}
			defer tx.Rollback(ctx)
			if err := tx.QueryRow(ctx, sel, id).Scan(&v); err != nil {
				return "", err
			}
			return v, tx.Commit(ctx)
		}},
	} {
		t.Run(read.name, func(t *testing.T) {
			per, counted := guardedRoundTrips(t, ctx, handleWrites{h}, proxies, read.run)
			t.Logf("guarded session %s: %.2f round trips over %d reads on connections used before (pgxpool: %d)", read.name, per, counted, read.trips)
			if per != float64(read.trips) {
				t.Errorf("a guarded %s made %.2f round trips, want %d (the check in the read's flight)", read.name, per, read.trips)
			}
		})
	}
	for _, drv := range []struct {
		name  string
		trips int // the inner driver's own for this read
	}{{"pgx", 1}, {"pq", 2}} {
		t.Run("database/sql "+drv.name, func(t *testing.T) {
			db, c := itest.Open(t, ep.clusterDSN()+"&pgreplica_driver="+drv.name+
				"&tuning_monitor_interval=1h&tuning_hedge_delay=-1s&application_name=pgreplica_guard")
			checks := c.Stats().ReplayChecks
			per, counted := guardedRoundTrips(t, ctx, sqlWrites{db, c}, proxies, func(ctx context.Context, id int64) (v string, err error) {
				return v, db.QueryRowContext(ctx, sel, id).Scan(&v)
			})
			st := c.Stats()
			t.Logf("guarded session query through database/sql (%s): %.2f round trips over %d reads on connections used before (%s alone: %d); %d checks in flight, %d before the read",
				drv.name, per, counted, drv.name, drv.trips, st.FlightChecks, st.ReplayChecks-checks)
			want := float64(drv.trips)
			if drv.name == "pq" {
				want++ // lib/pq cannot pipeline: the check goes first
			}
			if per != want {
				t.Errorf("a guarded query through database/sql (%s) made %.2f round trips, want %.0f", drv.name, per, want)
			}
		})
	}
}

// guardedWrites is what guardedRoundTrips needs of a handle: a write in
// the session's context that returns the new row's id, and its fallback
// count.
type guardedWrites interface {
	insert(ctx context.Context, sql, v string) (int64, error)
	fallbacks() int64
	// why says the fallbacks' reasons, for a failure's message.
	why() string
}

type handleWrites struct{ h *pgreplicapgx.Pool }

func (w handleWrites) insert(ctx context.Context, sql, v string) (id int64, err error) {
	return id, w.h.QueryRow(ctx, sql, v).Scan(&id)
}
func (w handleWrites) fallbacks() int64 { return w.h.Stat().FallbackReads }
func (w handleWrites) why() string      { return fmt.Sprint(w.h.Stat().Fallbacks) }

type sqlWrites struct {
	db *sql.DB
	c  *pgreplica.Connector
}

func (w sqlWrites) insert(ctx context.Context, sql, v string) (id int64, err error) {
	return id, w.db.QueryRowContext(ctx, sql, v).Scan(&id)
}
func (w sqlWrites) fallbacks() int64 { return w.c.Stats().FallbackReads }
func (w sqlWrites) why() string      { return fmt.Sprint(w.c.Stats().Fallbacks) }

// guardedRoundTrips writes a row and reads it back through read, in a
// session, once the replicas have replayed the write, and returns the
// round trips per read. The first read on each connection opens it and
// prepares the statements (pgxpool's first read on a connection does
// too): rounds whose read used a connection no earlier read used are not
// counted.
func guardedRoundTrips(t *testing.T, ctx context.Context, h guardedWrites, proxies []*countingProxy,
	read func(context.Context, int64) (string, error)) (per float64, counted int) {
	t.Helper()
	sess := pgreplica.NewSession()
	sctx := pgreplica.WithSession(ctx, sess)
	insert := "INSERT INTO " + rtTable + " (v) VALUES ($1) RETURNING id"
	const rounds, minCounted = 16, 8
	trips, fallbacks := 0, h.fallbacks()
	seen := map[*proxiedConn]bool{}
	for i := range rounds {
		want := fmt.Sprint("guarded ", i)
		id, err := h.insert(sctx, insert, want)
		if err != nil {
			t.Fatal(err)
		}
		lsn := sess.LSN() // the write's position, read on the capture connection (not counted)
		for r := range cluster.Len() {
			if r != cluster.Primary() {
				awaitReplayed(t, ctx, r, lsn)
			}
		}
		before := make([]map[*proxiedConn]int, len(proxies))
		for k, p := range proxies {
			before[k] = p.flightCounts()
		}
		got, err := read(sctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("round %d read %q, want its own write %q", i, got, want)
		}
		first := false
		for k, p := range proxies {
			for _, pc := range p.usedSince(before[k]) {
				first = first || !seen[pc]
				seen[pc] = true
			}
		}
		if !first {
			counted++
			for k, p := range proxies {
				trips += p.roundTripsSince(before[k])
			}
		}
	}
	if counted < minCounted {
		t.Fatalf("only %d of %d reads were on a connection used before; want at least %d", counted, rounds, minCounted)
	}
	if n := h.fallbacks() - fallbacks; n != 0 {
		t.Errorf("%d reads fell back to the primary: the replicas had replayed the write (fallbacks so far by reason: %s)", n, h.why())
	}
	return float64(trips) / float64(counted), counted
}

// awaitReplayed waits until node i has replayed lsn, asking it directly.
func awaitReplayed(t *testing.T, ctx context.Context, i int, lsn pgreplica.LSN) {
	t.Helper()
	for {
		ok, err := cluster.QueryString(ctx, i, "SELECT CASE WHEN pg_last_wal_replay_lsn() >= $1::pg_lsn THEN 'yes' END", lsn.String())
		if err != nil {
			t.Fatal(err)
		}
		if ok == "yes" {
			return
		}
		select {
		case <-ctx.Done():
			cur, _ := cluster.QueryString(context.Background(), i, "SELECT pg_last_wal_replay_lsn()::text")
			prim, _ := cluster.QueryString(context.Background(), cluster.Primary(), "SELECT pg_current_wal_lsn()::text")
			t.Fatalf("node %d did not replay %s (it replayed %s, the primary is at %s): %v", i, lsn, cur, prim, ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}
