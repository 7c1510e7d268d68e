package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
)

// futileApplyDelay is the recovery_min_apply_delay every replica gets in
// BenchmarkFutileWait: twice the default wait budget (150 ms), so that no
// replica can replay a fresh write before the budget runs out.
const futileApplyDelay = 300 * time.Millisecond

// futileSettle is how long BenchmarkFutileWait writes and reads before it
// times anything, so that pgreplica's monitor (a probe every 250 ms by
// default) has seen the replicas lag, as it would have in a service that
// has been running for a while.
const futileSettle = time.Second

// BenchmarkFutileWait measures a read right after a write when it cannot
// be served by a replica in time: every replica applies each commit
// futileApplyDelay after the primary, and the read has the default wait
// budget (150 ms) and the default "process" consistency (pgx inner
// driver). Waiting for a replica is then futile: the read ends on the
// primary anyway, and whatever it waited first is pure loss. The direct
// side writes and reads on the primary with plain pgx.
//
// Each iteration writes a row and reads it back on each side, in
// alternating order; only the read is timed. It reports direct-ms/read and
// pgreplica-ms/read (means), extra-ms/read (their difference: what the
// guarantee costs such a read), and where pgreplica's reads ran and how
// long they waited (readPlacement). Every read must
// return the row just written.
func BenchmarkFutileWait(b *testing.B) {
	cluster.Need(b)
	createTable(b, "bench")
	e := newEnv(b, "pgx", clusterEndpoints(), "bench")
	delayReplicas(b, e, futileApplyDelay)
	// YoungWrite reads right after the write, when its position is not
	// read yet; KnownPosition first takes the session's token (as a
	// request's end does), so that the read knows the position and only
	// the prediction keeps it from waiting out the budget.
	for _, known := range []bool{false, true} {
		name := "YoungWrite"
		if known {
			name = "KnownPosition"
		}
		b.Run(name, func(b *testing.B) { futileWait(b, e, known) })
	}
}

func futileWait(b *testing.B, e *env, known bool) {
	sides := []struct {
		name string
		db   *sql.DB
	}{{"direct", e.primary}, {"pgreplica", e.writer}}
	readAfterWrite := func(db *sql.DB) time.Duration {
		ctx := context.Background()
		sess := pgreplica.NewSession()
		if known {
			ctx = pgreplica.WithSession(ctx, sess)
		}
		r, err := writeRow(ctx, e, db)
		if err != nil {
			b.Fatal(err)
		}
		if known {
			_ = sess.Token()
		}
		start := time.Now()
		if err := r.readBack(ctx, e, db); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	for i, start := 0, time.Now(); i < 5 || time.Since(start) < futileSettle; i++ {
		for _, s := range sides {
			readAfterWrite(s.db)
		}
	}
	before := placementOf(b, e.writer)
	var total [2]time.Duration
	n := 0
	for ; b.Loop(); n++ {
		for k := range sides {
			i := (k + n) % 2
			total[i] += readAfterWrite(sides[i].db)
		}
	}
	if n == 0 {
		return
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / float64(n) }
	b.ReportMetric(ms(total[0]), "direct-ms/read")
	b.ReportMetric(ms(total[1]), "pgreplica-ms/read")
	b.ReportMetric(ms(total[1]-total[0]), "extra-ms/read")
	placementOf(b, e.writer).report(b, before)
}

// delayReplicas sets recovery_min_apply_delay to d on every replica, and
// back to 0 when b ends (then waits until they caught up, for the
// benchmarks that follow on the same cluster). It returns once the delay
// is in effect: a row written on the primary is still invisible on every
// replica d/3 later, far longer than replication takes on loopback.
func delayReplicas(b *testing.B, e *env, d time.Duration) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var delayed []int
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, i := range delayed {
			if err := cluster.SetApplyDelay(ctx, i, 0); err != nil {
				b.Errorf("removing the apply delay of node %d: %v", i, err)
			}
		}
		if err := cluster.WaitCaughtUp(ctx); err != nil {
			b.Errorf("after removing the apply delays: %v", err)
		}
	})
	var replicas []*sql.DB
	for i := range cluster.Len() {
		if i == cluster.Primary() {
			continue
		}
		delayed = append(delayed, i) // even if setting it fails half-way
		if err := cluster.SetApplyDelay(ctx, i, d); err != nil {
			b.Fatal(err)
		}
		replicas = append(replicas, openDB(b, "pgx", cluster.NodeDSN(i)))
	}
	for {
		r, err := writeRow(ctx, e, e.primary)
		if err != nil {
			b.Fatal(err)
		}
		time.Sleep(d / 3)
		visible := 0
		for _, db := range replicas {
			var v string
			err := db.QueryRowContext(ctx, e.selectSQL, r.id).Scan(&v)
			switch {
			case err == nil:
				visible++
			case !errors.Is(err, sql.ErrNoRows):
				b.Fatal(err)
			}
		}
		if visible == 0 {
			return
		}
		if ctx.Err() != nil {
			b.Fatal(fmt.Errorf("the apply delay of %v is not in effect: %w", d, ctx.Err()))
		}
	}
}
