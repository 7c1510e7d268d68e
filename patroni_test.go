package pgreplica

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// TestPatroniLookup: the name is answered with the members' addresses
// from the first REST API that answers, noloadbalance replicas left out
// (not a noloadbalance leader); no answer is an error naming each url.
func TestPatroniLookup(t *testing.T) {
	const cluster = `{"members": [
		{"name": "pg1", "role": "leader", "state": "running", "host": "127.0.0.1", "port": 5432, "tags": {"noloadbalance": true}},
		{"name": "pg2", "role": "replica", "state": "streaming", "host": "127.0.0.2", "port": 5433},
		{"name": "pg3", "role": "replica", "state": "streaming", "host": "127.0.0.3", "port": 5434, "tags": {"noloadbalance": "true"}},
		{"name": "pg4", "role": "sync_standby", "state": "streaming", "host": "::1", "port": 5435, "tags": {"nofailover": true}}
	]}`
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/cluster" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(cluster))
	}))
	defer up.Close()
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", http.StatusServiceUnavailable)
	}))
	defer down.Close()

	ctx := context.Background()
	got, err := PatroniLookup("shop", down.URL, up.URL+"/")(ctx, "shop")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"127.0.0.1:5432", "127.0.0.2:5433", "[::1]:5435"}
	if !slices.Equal(got, want) {
		t.Errorf("members %v, want %v", got, want)
	}
	if got, err := PatroniLookup("shop", up.URL)(ctx, "localhost"); err != nil || len(got) == 0 {
		t.Errorf("another name: %v, %v; want the system resolver's answer", got, err)
	}
	_, err = PatroniLookup("shop", down.URL, "http://127.0.0.1:1")(ctx, "shop")
	if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("no Patroni answering: %v; want each url's failure", err)
	}
	if _, err := PatroniLookup("shop")(ctx, "shop"); err == nil {
		t.Error("no url: want an error")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := PatroniLookup("shop", up.URL)(cctx, "shop"); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}
