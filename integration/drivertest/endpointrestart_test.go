package drivertest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration"
)

// TestReaderEndpointRestartsFailNoRead: the replicas behind an HAProxy
// reader endpoint with PgBouncer (session mode) in front of it, as a
// platform gives them, the primary direct. Eight readers run reads of a
// few milliseconds each while the endpoint and the pooler are restarted
// three times each, one after the other: every connection through them
// dies, most of them in the middle of a read. A read that failed before
// its first row (PgBouncer's "server conn crashed?" when HAProxy cut its
// server connection, an EOF when PgBouncer itself went) is sent again on
// a new connection, so no read fails, with either inner driver (with
// pgx, 8 reads failed per run while FATAL 08P01 did not count as a lost
// connection; lib/pq reported those as driver.ErrBadConn, which
// database/sql sends again itself).
func TestReaderEndpointRestartsFailNoRead(t *testing.T) {
	for _, inner := range []string{"pgx", "pq"} {
		t.Run(inner, func(t *testing.T) { endpointRestarts(t, inner) })
	}
}

func endpointRestarts(t *testing.T, inner string) {
	h := cluster.ReaderEndpoint(t)
	pb := integration.NewPgBouncer(t, integration.PgBouncerOptions{Upstream: h.Addr(), Mode: integration.PoolSession})
	db, c := openShape(t, inner, []string{primaryAddr(), pb.Addr()})
	ctx := ctxFor(t)
	holdReads(t, db, 8)

	var mu sync.Mutex
	var reads int
	var failed []error
	stop := loop(8, func(int) {
		rctx, cancel := context.WithTimeout(pgreplica.WithEventual(ctx), 5*time.Second)
		defer cancel()
		var n int
		err := db.QueryRowContext(rctx, "SELECT count(*) FROM generate_series(1, 20000)").Scan(&n)
		mu.Lock()
		defer mu.Unlock()
		reads++
		if err == nil && n != 20000 {
			err = fmt.Errorf("count %d, want 20000", n)
		}
		if err != nil {
			failed = append(failed, err)
		}
	})
	before := c.Stats()
	restarts := []struct {
		name    string
		restart func(context.Context) (time.Duration, error)
	}{{"HAProxy", h.Restart}, {"PgBouncer", pb.Restart}}
	for range 3 {
		for _, r := range restarts {
			time.Sleep(300 * time.Millisecond) // traffic between the restarts
			if _, err := r.restart(ctx); err != nil {
				stop()
				t.Fatalf("restart %s: %v", r.name, err)
			}
		}
	}
	time.Sleep(300 * time.Millisecond)
	stop()
	after := c.Stats()

	onReplicas := after.ReplicaReads - before.ReplicaReads
	t.Logf("%d reads, %d on the replicas, %d failed, across 3 restarts of HAProxy and 3 of PgBouncer", reads, onReplicas, len(failed))
	for i, err := range failed {
		if i == 5 {
			break
		}
		t.Errorf("read failed: %v", err)
	}
	if onReplicas == 0 {
		t.Error("no read ran on the replicas")
	}
}
