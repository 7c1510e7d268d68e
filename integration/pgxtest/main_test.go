// Tests of pgreplicapgx, the pgx-native handle, against a real primary
// and two streaming replicas started by the integration harness, through
// the sqlc-generated package authors.
package pgxtest

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica/integration"
	"github.com/pgreplica/pgreplica/integration/pgxtest/authors"
	"github.com/pgreplica/pgreplica/pgreplicapgx"
)

var cluster *integration.Cluster

func TestMain(m *testing.M) {
	os.Exit(integration.Main(m, integration.Options{Replicas: 2}, &cluster))
}

// schema is sqlc/schema.sql, for one test's own table name.
const schema = `DROP TABLE IF EXISTS authors; CREATE TABLE authors (id bigserial PRIMARY KEY, name text NOT NULL, bio text)`

// open returns a handle on the shared cluster with the authors table
// (re)created and replayed everywhere; closed with t. Tests using it do
// not run in parallel: they share the table.
func open(t *testing.T, params ...string) (*pgreplicapgx.Pool, *authors.Queries) {
	t.Helper()
	pool := openConfig(t, func(*pgreplicapgx.Config) {}, append([]string{"tuning_monitor_interval=50ms"}, params...)...)
	ctx := ctxFor(t)
	if _, err := pool.Exec(ctx, schema); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	return pool, authors.New(pool)
}

func appName(t *testing.T) string {
	r := strings.NewReplacer("/", "_", " ", "_", "#", "_")
	return "pgrpgx_" + r.Replace(t.Name())
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// nodeOf maps a server port to the harness node index.
func nodeOf(t *testing.T, port int32) int {
	t.Helper()
	n := cluster.NodeAt(int(port))
	if n < 0 {
		t.Fatalf("port %d is no node of the cluster", port)
	}
	return n
}

// onReplica waits until a read served by f runs on a replica (the router
// learns that replay resumed within a probe interval) and fails t if it
// never does.
func onReplica(t *testing.T, f func() (int32, error)) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		port, err := f()
		if err != nil {
			t.Fatal(err)
		}
		if nodeOf(t, port) != cluster.Primary() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("reads still go to the primary after replay resumed")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
