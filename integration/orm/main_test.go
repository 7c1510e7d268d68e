package orm_test

import (
	"context"
	"database/sql"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration"
)

var cluster *integration.Cluster

func TestMain(m *testing.M) {
	if step := os.Getenv(gooseChildEnv); step != "" {
		os.Exit(gooseChild(step)) // a goose process of TestGooseNextProcess
	}
	os.Exit(integration.Main(m, integration.Options{Replicas: 2}, &cluster))
}

// waitBudget is shorter than the default so that the reads the scenarios
// make with replay paused (each waits the whole budget before it falls
// back) keep the package fast.
const waitBudget = "pgreplica_wait_budget=100ms"

// dsn returns the cluster's pgreplica DSN with the test's name as
// application_name, so its server sessions can be told apart.
func dsn(t *testing.T) string {
	t.Helper()
	cluster.Need(t)
	r := strings.NewReplacer("/", "_", " ", "_", "#", "_", "+", "_")
	return cluster.DSN() + "&" + waitBudget + "&application_name=" + r.Replace("orm_"+t.Name())
}

// openDB returns a pgreplica *sql.DB on the shared cluster, closed with t.
func openDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open(pgreplica.DriverName, dsn(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.Ping(); err != nil {
		t.Fatal(err)
	}
	return db
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// connectorOf returns the connector behind db, for its Stats.
func connectorOf(t *testing.T, db *sql.DB) *pgreplica.Connector {
	t.Helper()
	c, err := pgreplica.ConnectorOf(ctxFor(t), db)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// nodeOf maps a server port to the harness node index.
func nodeOf(t *testing.T, port int) int {
	t.Helper()
	n := cluster.NodeAt(port)
	if n < 0 {
		t.Fatalf("port %d is no node of the cluster", port)
	}
	return n
}

// dropItems drops the items table on the primary, behind pgreplica's back:
// the migration that recreates it must not trust a replica (see
// testLibrary).
func dropItems(t *testing.T) {
	t.Helper()
	if err := cluster.Exec(ctxFor(t), cluster.Primary(), "DROP TABLE IF EXISTS items"); err != nil {
		t.Fatal(err)
	}
}
