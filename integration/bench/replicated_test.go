package bench

import (
	"context"
	"database/sql"
	"testing"

	"github.com/pgreplica/pgreplica"
)

// BenchmarkReplicatedWrite is what WithReplicated costs a write: paired
// autocommit INSERTs through the same pgreplica handle, plain (direct) and
// with WithReplicated(ctx, n) (routed), so the ratio is the wait for n
// replicas to show the write flushed (the write's position read once, the
// replicas' probes asked at once). ns/op is both together.
func BenchmarkReplicatedWrite(b *testing.B) {
	for _, n := range []int{1, 2} {
		w := workload{
			name: "n=" + string(rune('0'+n)), run: insertRow, direct: onWriter,
			routed: func(ctx context.Context, e *env) (context.Context, *sql.DB) {
				return pgreplica.WithReplicated(ctx, n), e.writer
			},
		}
		b.Run(w.name, func(b *testing.B) {
			createTable(b, "bench")
			benchPair(b, newEnv(b, "pgx", clusterEndpoints(), "bench"), w)
		})
	}
}
