package bench

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/internal/pgxroute"
)

// BenchmarkRoutingCold is what a read's routing touches in memory: the
// pgx handle's router routes a read (the operation sends nothing) and its
// lease gives the connection back, or pgxpool acquires and releases a
// connection, with 1 MB of other memory written before each, so that every
// cache line either side needs is a miss. Its time means little; run it
// under cachegrind, each side alone, at two counts, and the difference
// per operation is the misses of one routing (cmd/cachemiss, and
// docs/performance.md for the command).
func BenchmarkRoutingCold(b *testing.B) {
	createTable(b, "bench")
	e := newPgxEnv(b, clusterEndpoints(), "bench", 4)
	r, ok := pgxroute.For(e.reader.Connector())
	if !ok {
		b.Fatal("no pgx router")
	}
	junk := make([]byte, 1<<20)
	flush := func() {
		for i := 0; i < len(junk); i += 64 {
			junk[i]++
		}
	}
	route := func(ctx context.Context) func(b *testing.B) {
		op := pgxroute.OpFunc(func(*pgx.Conn) error { return nil })
		req := pgxroute.Request{Kind: pgxroute.Query, SQL: e.selectSQL}
		return func(b *testing.B) {
			for b.Loop() {
				flush()
				l, err := r.Route(ctx, req, op)
				if err != nil {
					b.Fatal(err)
				}
				l.Done(nil)
			}
		}
	}
	bg := context.Background()
	b.Run("eventual", route(pgreplica.WithEventual(bg)))
	b.Run("session", route(pgreplica.WithSession(bg, e.session)))
	b.Run("pgxpool", func(b *testing.B) {
		for b.Loop() {
			flush()
			c, err := e.replica.Acquire(bg)
			if err != nil {
				b.Fatal(err)
			}
			c.Release()
		}
	})
}
