package pgreplicahttptest

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica/integration"
	"github.com/pgreplica/pgreplica/integration/itest"
)

// cluster is one primary and two streaming replicas shared by the
// package's integration tests (nil without PostgreSQL: they skip).
var cluster *integration.Cluster

func TestMain(m *testing.M) {
	os.Exit(integration.Main(m, integration.Options{Replicas: 2}, &cluster))
}

func ctxFor(t *testing.T) context.Context { return itest.Ctx(t, time.Minute) }

// openDB returns a pgreplica *sql.DB on the shared cluster, closed with t.
func openDB(t *testing.T) *sql.DB {
	t.Helper()
	cluster.Need(t)
	db, _ := itest.Open(t, cluster.DSN()+"&application_name=pgreplicahttp_test")
	return db
}

// itemsTable creates a fresh table for t on the primary.
func itemsTable(t *testing.T, db *sql.DB) string {
	t.Helper()
	name := "items_" + strings.ToLower(strings.NewReplacer("/", "_", "#", "_").Replace(t.Name()))
	if _, err := db.ExecContext(ctxFor(t), fmt.Sprintf("DROP TABLE IF EXISTS %[1]s; CREATE TABLE %[1]s (id serial PRIMARY KEY, v text)", name)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cluster.Exec(context.Background(), cluster.Primary(), "DROP TABLE IF EXISTS "+name) })
	return name
}

// pauseReplicas pauses replay on every replica once they have caught up
// (so the table exists there), and resumes it at cleanup.
func pauseReplicas(t *testing.T) {
	t.Helper()
	ctx := ctxFor(t)
	if err := cluster.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	cluster.PauseReplicas(t)
}

// nodeOf maps the X-Served-By port of a response to a node index.
func nodeOf(t *testing.T, resp *http.Response) int {
	t.Helper()
	port, err := strconv.Atoi(resp.Header.Get("X-Served-By"))
	if err != nil {
		t.Fatalf("no X-Served-By in %v", resp.Header)
	}
	n := cluster.NodeAt(port)
	if n < 0 {
		t.Fatalf("port %d is no node of the cluster", port)
	}
	return n
}

// itemsApp is a small application: POST /items creates an item and
// redirects to it; GET /items/{id} shows it (404 when the server that
// answered does not have it). Every response names the server that ran
// its query in X-Served-By.
func itemsApp(t *testing.T, db *sql.DB, table string) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /items", func(w http.ResponseWriter, r *http.Request) {
		var id, port int
		err := db.QueryRowContext(r.Context(),
			"INSERT INTO "+table+" (v) VALUES ($1) RETURNING id, inet_server_port()", r.FormValue("v")).Scan(&id, &port)
		if err != nil {
			t.Errorf("insert: %v", err)
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("X-Served-By", strconv.Itoa(port))
		http.Redirect(w, r, fmt.Sprint("/items/", id), http.StatusSeeOther)
	})
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		var v sql.NullString
		var port int
		err := db.QueryRowContext(r.Context(),
			"SELECT (SELECT v FROM "+table+" WHERE id = $1), inet_server_port()", r.PathValue("id")).Scan(&v, &port)
		if err != nil {
			t.Errorf("select: %v", err)
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("X-Served-By", strconv.Itoa(port))
		if !v.Valid {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, v.String)
	})
	return mux
}
