package redisstoretest

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/pgreplicahttp"
	"github.com/pgreplica/pgreplica/redisstore"
)

// instance is one application instance: its own *sql.DB and middleware,
// sharing only the Redis store with the others.
func instance(t *testing.T, store pgreplicahttp.TokenStore, table string) *httptest.Server {
	db, err := sql.Open("pgreplica", cluster.DSN()+"&application_name=redisstore_test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	// The instance starts now, as a deployed one does: it reads nothing
	// older than the database was then (pgreplica's start position), so
	// what others write later is theirs to wait for, not its.
	if err := db.Ping(); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /items", func(w http.ResponseWriter, r *http.Request) {
		var id int
		if err := db.QueryRowContext(r.Context(), "INSERT INTO "+table+" (v) VALUES ($1) RETURNING id", r.FormValue("v")).Scan(&id); err != nil {
			t.Errorf("insert: %v", err)
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		http.Redirect(w, r, fmt.Sprint("/items/", id), http.StatusSeeOther)
	})
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		var v sql.NullString
		var replica bool
		if err := db.QueryRowContext(r.Context(), "SELECT (SELECT v FROM "+table+" WHERE id = $1), pg_is_in_recovery()", r.PathValue("id")).Scan(&v, &replica); err != nil {
			t.Errorf("select: %v", err)
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("X-Replica", fmt.Sprint(replica))
		if !v.Valid {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, v.String)
	})
	srv := httptest.NewTLSServer(pgreplicahttp.Middleware(pgreplicahttp.Options{
		Codec: pgreplica.TokenCodec{Key: []byte("0123456789abcdef0123456789abcdef")},
		Store: store,
		StoreKey: func(r *http.Request) (string, bool) {
			u := r.Header.Get("X-User")
			return u, u != ""
		},
	})(mux))
	t.Cleanup(srv.Close)
	return srv
}

// fetch sends a request as user from a browser with its own cookie jar.
func fetch(t *testing.T, srv *httptest.Server, method, path, user string, form url.Values) (*http.Response, string) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := *srv.Client()
	c.Jar = jar
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-User", user)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 500 {
		t.Fatalf("%s %s: %s %s", method, path, resp.Status, body)
	}
	return resp, string(body)
}

// TestSecondTabAcrossInstances: a user writes through one application
// instance; another tab of the same user, without that tab's cookie and
// served by another instance, sees the write while replay is paused on
// every replica, because both instances share the Redis store.
func TestSecondTabAcrossInstances(t *testing.T) {
	rdb, prefix := needRedis(t)
	cluster.Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const table = "redisstore_items"
	if err := cluster.Exec(ctx, cluster.Primary(), "DROP TABLE IF EXISTS "+table+"; CREATE TABLE "+table+" (id serial PRIMARY KEY, v text)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cluster.Exec(context.Background(), cluster.Primary(), "DROP TABLE IF EXISTS "+table) })
	store := redisstore.New(rdb, prefix)
	a, b := instance(t, store, table), instance(t, store, table)
	if err := cluster.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	cluster.PauseReplicas(t)

	resp, body := fetch(t, a, http.MethodPost, "/items", "alice", url.Values{"v": {"via A"}})
	if resp.StatusCode != http.StatusOK || body != "via A" {
		t.Fatalf("tab 1 after its redirect: %s %q", resp.Status, body)
	}
	item := resp.Request.URL.Path
	resp, body = fetch(t, b, http.MethodGet, item, "alice", nil)
	if resp.StatusCode != http.StatusOK || body != "via A" || resp.Header.Get("X-Replica") != "false" {
		t.Fatalf("tab 2 on instance B: %s %q (replica %s)", resp.Status, body, resp.Header.Get("X-Replica"))
	}
	resp, _ = fetch(t, b, http.MethodGet, item, "bob", nil)
	if resp.StatusCode != http.StatusNotFound || resp.Header.Get("X-Replica") != "true" {
		t.Fatalf("another user on instance B: %s (replica %s), want 404 from a replica", resp.Status, resp.Header.Get("X-Replica"))
	}
	if tok, ok, err := store.Get(ctx, "alice"); err != nil || !ok || tok.LSN == 0 {
		t.Fatalf("stored token of alice: %+v %v %v", tok, ok, err)
	}
}
