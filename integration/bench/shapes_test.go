package bench

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration"
)

// BenchmarkShapeRead is what a read costs in each deployment shape: a
// read with the process default (a position to prove), on caught-up
// replicas, through pgreplica with pgx, beside pgx's stdlib driver reading
// the same address directly. Direct: each replica its own address. An
// endpoint: HAProxy round-robining over both replicas (proven by what all
// servers behind it are known to have: nothing extra). A pooler: PgBouncer
// in transaction mode in front of replica 1 (proven by a check in the
// read's own flight, replaycheck.go).
//
//	go test -run '^$' -bench BenchmarkShapeRead -benchtime 3000x -count 5 ./integration/bench
func BenchmarkShapeRead(b *testing.B) {
	cluster.Need(b)
	const table = "bench_shapes"
	createTable(b, table)
	if err := cluster.WaitCaughtUp(context.Background()); err != nil {
		b.Fatal(err)
	}
	primary := fmt.Sprintf("127.0.0.1:%d", cluster.Port(cluster.Primary()))
	ep := cluster.ReaderEndpoint(b)
	pgb := cluster.PgBouncer(b, 1, integration.PoolTransaction)
	for _, shape := range []struct {
		name, replica, params string
	}{
		{"direct", fmt.Sprintf("127.0.0.1:%d", cluster.Port(1)), ""},
		{"endpoint", ep.Addr(), ""},
		{"pooler", pgb.Addr(), "&default_query_exec_mode=exec"},
	} {
		direct := openDB(b, "pgx", integration.HostsDSN(shape.replica)+shape.params)
		routed := openDB(b, pgreplica.DriverName, integration.HostsDSN(primary, shape.replica)+shape.params+
			"&tuning_hedge_delay=-1s&application_name=pgreplica_shapes")
		for _, side := range []struct {
			name string
			db   *sql.DB
		}{{"pgx", direct}, {"pgreplica", routed}} {
			b.Run(shape.name+"/"+side.name, func(b *testing.B) {
				ctx := context.Background()
				var v string
				for i := 0; b.Loop(); i++ {
					if err := side.db.QueryRowContext(ctx, "SELECT v FROM "+table+" WHERE id = $1", 1+i%seedRows).Scan(&v); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
