// Package drivertest runs pgreplica through database/sql against a real
// primary and two streaming replicas started by the integration harness.
package drivertest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration"
	"github.com/pgreplica/pgreplica/integration/itest"
)

var cluster *integration.Cluster

func TestMain(m *testing.M) {
	os.Exit(integration.Main(m, integration.Options{Replicas: 2}, &cluster))
}

// drivers are the inner drivers every routing test runs with.
var drivers = []string{"pgx", "pq"}

// open returns a pgreplica *sql.DB on the shared cluster, closed with t.
func open(t *testing.T, inner string, params ...string) *sql.DB {
	t.Helper()
	cluster.Need(t)
	return openOn(t, cluster, append([]string{"pgreplica_driver=" + inner}, params...)...)
}

// openOn returns a pgreplica *sql.DB on c, closed with t.
func openOn(t *testing.T, c *integration.Cluster, params ...string) *sql.DB {
	t.Helper()
	db, _ := openDSN(t, c.DSN(), params...)
	return db
}

// openDSN returns a pgreplica *sql.DB on dsn with params (tuning_*
// parameters too, see itest.ParseDSN) and the test's application_name,
// pinged, and its connector; closed with t.
func openDSN(t *testing.T, dsn string, params ...string) (*sql.DB, *pgreplica.Connector) {
	t.Helper()
	dsn += "&application_name=" + appName(t)
	for _, p := range params {
		dsn += "&" + p
	}
	return itest.Open(t, dsn)
}

// appName tags a test's server sessions so they can be found in
// pg_stat_activity.
func appName(t *testing.T) string {
	r := strings.NewReplacer("/", "_", " ", "_", "#", "_")
	return "pgr_" + r.Replace(t.Name())
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
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

// servedBy runs a query returning inet_server_port() and reports the node.
func servedBy(t *testing.T, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, ctx context.Context, query string, args ...any) int {
	t.Helper()
	var port int
	if err := q.QueryRowContext(ctx, query, args...).Scan(&port); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return nodeOf(t, port)
}

// stmtNode reads the node of a prepared statement's inet_server_port() row.
func stmtNode(t *testing.T, row *sql.Row) int {
	t.Helper()
	var port int
	if err := row.Scan(&port); err != nil {
		t.Fatal(err)
	}
	return nodeOf(t, port)
}

// mustExec runs admin SQL on node i.
func mustExec(t *testing.T, i int, sql string) {
	t.Helper()
	if err := cluster.Exec(ctxFor(t), i, sql); err != nil {
		t.Fatal(err)
	}
}

func table(t *testing.T, db *sql.DB) string {
	t.Helper()
	name := strings.ToLower(appName(t))
	if _, err := db.Exec(fmt.Sprintf("DROP TABLE IF EXISTS %s; CREATE TABLE %s (id serial PRIMARY KEY, v text)", name, name)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mustExec(t, cluster.Primary(), "DROP TABLE IF EXISTS "+name) })
	return name
}

func itoa(i int) string { return strconv.Itoa(i) }

var _ = pgreplica.DriverName
