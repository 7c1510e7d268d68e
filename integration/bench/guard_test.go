package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/pgreplicapgx"
)

// TestGuardedReadRoundTrips: a session read that needs a write no replica
// is known to have (the monitor looks once an hour here, so what the
// router knows of the replicas' replay is older than every write) costs
// the pgx-native handle one round trip, as the same read costs a
// pgxpool.Pool of that replica: the replay check rides in the read's own
// flight. (The database/sql driver checks first: two round trips.)
func TestGuardedReadRoundTrips(t *testing.T) {
	cluster.Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ep, proxies := countingEndpoints(t)
	createTable(t, rtTable)
	h := pinged(t, pgreplicapgx.New, ep.clusterDSN()+"&pgreplica_monitor_interval=1h&application_name=pgreplica_guard")
	sess := pgreplica.NewSession()
	sctx := pgreplica.WithSession(ctx, sess)
	insert := "INSERT INTO " + rtTable + " (v) VALUES ($1) RETURNING id"
	sel := "SELECT v FROM " + rtTable + " WHERE id = $1"

	// The first read on each connection opens it and prepares the
	// statements (pgxpool's first read on a connection does too): rounds
	// whose read used a connection no earlier read used are not counted.
	const rounds, minCounted = 16, 8
	trips, counted, fallbacks := 0, 0, h.Stat().FallbackReads
	seen := map[*proxiedConn]bool{}
	for i := range rounds {
		want := fmt.Sprint("guarded ", i)
		var id int64
		if err := h.QueryRow(sctx, insert, want).Scan(&id); err != nil {
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
		var got string
		if err := h.QueryRow(sctx, sel, id).Scan(&got); err != nil {
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
	s := h.Stat()
	per := float64(trips) / float64(counted)
	t.Logf("guarded session reads: %.2f round trips per read over %d reads on connections used before; %d replica reads, %d fallbacks", per, counted, s.ReplicaReads, s.FallbackReads-fallbacks)
	if s.FallbackReads != fallbacks {
		t.Errorf("%d reads fell back to the primary: the replicas had replayed the write", s.FallbackReads-fallbacks)
	}
	if per != 1 {
		t.Errorf("a guarded read made %.2f round trips, want 1 (the check in the read's flight)", per)
	}
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
