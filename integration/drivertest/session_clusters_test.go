package drivertest

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration"
)

// TestSessionAcrossClusters: an application with two databases (two
// clusters, each a primary and a replica) writes to A and then to B with
// one Session, and hands its token to another process (here: a second
// *sql.DB per cluster whose default consistency is eventual, so that only
// the token can carry the guarantee). With replay paused on both clusters'
// replicas, that process reads both rows, from each cluster's primary, and
// without the token it does not see them.
func TestSessionAcrossClusters(t *testing.T) {
	cluster.Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a := startCluster(ctx, t, false)
	b := startCluster(ctx, t, true)
	sysA, sysB := systemID(ctx, t, a), systemID(ctx, t, b)
	if sysA == sysB {
		t.Fatalf("both clusters have system identifier %d: the harness gave B a copy of A's data directory", sysA)
	}

	const tbl = "session_clusters"
	writers := map[string]*sql.DB{"A": openOn(t, a), "B": openOn(t, b)}
	for name, db := range writers {
		if _, err := db.ExecContext(ctx, "CREATE TABLE "+tbl+" (id serial PRIMARY KEY, v text)"); err != nil {
			t.Fatalf("cluster %s: %v", name, err)
		}
	}
	for _, c := range []*integration.Cluster{a, b} {
		if err := c.WaitCaughtUp(ctx); err != nil {
			t.Fatal(err)
		}
		c.PauseReplicas(t)
	}

	// Process 1: one session writes to A, then to B.
	sess := pgreplica.NewSession()
	ids := map[string]int{}
	for _, name := range []string{"A", "B"} {
		var id int
		if err := writers[name].QueryRowContext(pgreplica.WithSession(ctx, sess),
			"INSERT INTO "+tbl+" (v) VALUES ($1) RETURNING id", "row of "+name).Scan(&id); err != nil {
			t.Fatalf("insert into %s: %v", name, err)
		}
		ids[name] = id
	}
	if sess.LSNFor(sysA) == 0 || sess.LSNFor(sysB) == 0 || sess.WriteCount() != 2 {
		t.Fatalf("the writes did not reach the session per cluster: %+v (writes %d)", sess.Snapshot(), sess.WriteCount())
	}
	codec := pgreplica.TokenCodec{Key: []byte("0123456789abcdef0123456789abcdef"), TTL: time.Minute}
	token := codec.SessionToken(sess)

	// Process 2.
	readers := map[string]*sql.DB{"A": openOn(t, a, "pgreplica_consistency=eventual"), "B": openOn(t, b, "pgreplica_consistency=eventual")}
	clusters := map[string]*integration.Cluster{"A": a, "B": b}
	tok, err := codec.Decode(token)
	if err != nil {
		t.Fatal(err)
	}
	if tok.LSNFor(sysA) != sess.LSNFor(sysA) || tok.LSNFor(sysB) != sess.LSNFor(sysB) {
		t.Fatalf("token %+v lost a cluster of session %+v", tok, sess.Snapshot())
	}
	fresh := pgreplica.NewSession()
	if err := fresh.Merge(tok); err != nil {
		t.Fatal(err)
	}
	const q = "SELECT v, inet_server_port() FROM " + tbl + " WHERE id = $1"
	for _, name := range []string{"B", "A"} {
		db, c := readers[name], clusters[name]
		// Without the token: a paused replica, no row.
		var v string
		var port int
		if err := db.QueryRowContext(ctx, q, ids[name]).Scan(&v, &port); !errors.Is(err, sql.ErrNoRows) {
			t.Fatalf("cluster %s without the token: %v, want no rows from a paused replica", name, err)
		}
		for how, rctx := range map[string]context.Context{
			"session": pgreplica.WithSession(ctx, fresh),
			"token":   pgreplica.WithToken(ctx, tok),
		} {
			if err := db.QueryRowContext(rctx, q, ids[name]).Scan(&v, &port); err != nil {
				t.Fatalf("cluster %s with the %s: %v", name, how, err)
			}
			if v != "row of "+name || c.NodeAt(port) != c.Primary() {
				t.Fatalf("cluster %s with the %s: %q from node %d, want the primary", name, how, v, c.NodeAt(port))
			}
		}
	}
}

// startCluster starts a primary and one replica for t, closed at cleanup.
//
// Clusters need system identifiers of their own, as real ones have: the
// driver keys a session's positions by them. The local runtime copies the
// initdb output of the first cluster of a process into later clusters with
// the same binary directory, which gives them that cluster's system
// identifier; fresh spells the binary directory differently, which the
// harness takes for another one, so that the cluster runs initdb itself.
func startCluster(ctx context.Context, t *testing.T, fresh bool) *integration.Cluster {
	t.Helper()
	opts := integration.Options{Replicas: 1}
	if fresh && cluster.Runtime() == integration.RuntimeLocal {
		opts.BinDir = binDir()
		if opts.BinDir != "" {
			opts.BinDir += string(filepath.Separator) + "."
		}
	}
	c, err := integration.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// binDir finds the server binaries the way the harness does by default:
// $PGREPLICA_PG_BIN, else the directory of initdb on PATH; "" when neither.
func binDir() string {
	if d := os.Getenv("PGREPLICA_PG_BIN"); d != "" {
		return d
	}
	p, err := exec.LookPath("initdb")
	if err != nil {
		return ""
	}
	if r, err := filepath.EvalSymlinks(p); err == nil {
		p = r
	}
	return filepath.Dir(p)
}

func systemID(ctx context.Context, t *testing.T, c *integration.Cluster) uint64 {
	t.Helper()
	s, err := c.QueryString(ctx, c.Primary(), "SELECT system_identifier FROM pg_control_system()")
	if err != nil {
		t.Fatal(err)
	}
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
