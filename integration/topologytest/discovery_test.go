package topologytest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration"
	"github.com/pgreplica/pgreplica/integration/itest"
)

// registry stands in for Patroni's REST API: GET /cluster lists the
// members the test says, in Patroni's words; failing answers 503.
type registry struct {
	c       *integration.Cluster
	mu      sync.Mutex
	members map[int]bool // node index: listed, and whether tagged noloadbalance
	failing bool
}

func (g *registry) set(members map[int]bool, failing bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.members, g.failing = members, failing
}

func (g *registry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.failing || r.URL.Path != "/cluster" {
		http.Error(w, "etcd unreachable", http.StatusServiceUnavailable)
		return
	}
	type member struct {
		Name string          `json:"name"`
		Role string          `json:"role"`
		Host string          `json:"host"`
		Port int             `json:"port"`
		Tags map[string]bool `json:"tags,omitempty"`
	}
	var out struct {
		Members []member `json:"members"`
	}
	for i, noLB := range g.members {
		m := member{Name: fmt.Sprintf("pg%d", i), Role: "replica", Host: "127.0.0.1", Port: g.c.Port(i)}
		if i == g.c.Primary() {
			m.Role = "leader"
		}
		if noLB {
			m.Tags = map[string]bool{"noloadbalance": true}
		}
		out.Members = append(out.Members, m)
	}
	_ = json.NewEncoder(w).Encode(out)
}

// TestPatroniDiscovery: a handle whose one host is a name answered by
// PatroniLookup follows the members the REST API lists, without a restart:
// a replica listed later takes reads; one no longer listed gets none; one
// tagged noloadbalance gets none; and while the API fails, the members
// last listed stay in force and Nodes says so.
func TestPatroniDiscovery(t *testing.T) {
	c := startCluster(t, integration.Options{})
	reg := &registry{c: c}
	reg.set(map[int]bool{c.Primary(): false, 1: false}, false)
	srv := httptest.NewServer(reg)
	defer srv.Close()

	cfg, err := itest.ParseDSN(c.DSN() + "&application_name=" + appName(t) + "&tuning_monitor_interval=50ms")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Hosts = []pgreplica.Host{{Addr: "shop-cluster"}}
	cfg.LookupFunc = pgreplica.PatroniLookup("shop-cluster", srv.URL)
	db, cn := itest.OpenConfig(t, cfg)
	ctx := pgreplica.WithEventual(testCtx(t, 2*time.Minute))

	// until reads (50 in a row) satisfy ok, within 20 s: the members are
	// asked every 2 s, and a new one is probed before it serves.
	until := func(what string, ok func(map[int]int) bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			seen := spread(t, ctx, db, c, 50)
			if ok(seen) {
				t.Logf("%s: %v", what, seen)
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: reads still went to %v", what, seen)
			}
		}
	}
	until("replica 1 only", func(s map[int]int) bool { return s[1] == 50 })

	reg.set(map[int]bool{c.Primary(): false, 1: false, 2: false}, false)
	until("replica 2 listed: it takes reads", func(s map[int]int) bool { return s[2] > 0 })

	reg.set(map[int]bool{c.Primary(): false, 1: false}, false)
	until("replica 2 no longer listed: none there", func(s map[int]int) bool { return s[1] == 50 })

	reg.set(map[int]bool{c.Primary(): false, 1: true, 2: false}, false)
	until("replica 1 noloadbalance: none there", func(s map[int]int) bool { return s[2] == 50 })

	reg.set(nil, true)
	if err := itest.WaitFor(ctx, "Nodes to show the failing lookup", func() (bool, string) {
		ns := cn.Nodes()
		for _, n := range ns {
			if !strings.Contains(n.Why, "members as last listed") {
				return false, fmt.Sprintf("%s: %s", n.Addr, n.Why)
			}
		}
		return len(ns) > 0, "no nodes"
	}); err != nil {
		t.Fatal(err)
	}
	if seen := spread(t, ctx, db, c, 50); seen[2] != 50 {
		t.Errorf("with the API failing, reads went to %v; want replica 2, as last listed", seen)
	}
	if _, err := db.ExecContext(ctx, "SELECT pg_logical_emit_message(false, 'discovery', 'x')"); err != nil {
		t.Errorf("a write with the API failing: %v", err)
	}
}
