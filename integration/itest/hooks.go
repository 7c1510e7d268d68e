package itest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration"
)

// What tests of pgx's hooks share (pgreplica.PgxHooks, both front doors):
// a tracer that records what pgx traces, a role that logs in with a
// password, its sessions ended, and waiting for the monitor's probes.

// Tracer records what pgx traces, as an application's tracer (a
// pgx.QueryTracer that traces batches, copies and connections too) sees
// it. It is safe for concurrent use.
type Tracer struct {
	mu       sync.Mutex
	queries  []string // TraceQueryStart's SQL
	batches  [][]string
	copies   []string
	connects int
}

var (
	_ pgx.QueryTracer    = (*Tracer)(nil)
	_ pgx.BatchTracer    = (*Tracer)(nil)
	_ pgx.CopyFromTracer = (*Tracer)(nil)
	_ pgx.ConnectTracer  = (*Tracer)(nil)
)

func (r *Tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.queries = append(r.queries, d.SQL)
	return ctx
}

func (r *Tracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *Tracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	var sqls []string
	for _, q := range d.Batch.QueuedQueries {
		sqls = append(sqls, q.SQL)
	}
	r.batches = append(r.batches, sqls)
	return ctx
}

func (r *Tracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *Tracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (r *Tracer) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceCopyFromStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.copies = append(r.copies, d.TableName.Sanitize())
	return ctx
}

func (r *Tracer) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

func (r *Tracer) TraceConnectStart(ctx context.Context, _ pgx.TraceConnectStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.connects++
	return ctx
}

func (r *Tracer) TraceConnectEnd(context.Context, pgx.TraceConnectEndData) {}

// All returns every SQL text traced: the queries', then the batches'
// statements one by one.
func (r *Tracer) All() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	all := slices.Clone(r.queries)
	for _, b := range r.batches {
		all = append(all, b...)
	}
	return all
}

// Count returns how many traced statements contain s.
func (r *Tracer) Count(s string) int {
	n := 0
	for _, q := range r.All() {
		if strings.Contains(q, s) {
			n++
		}
	}
	return n
}

// Batches returns the statements of each batch traced.
func (r *Tracer) Batches() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.batches)
}

// Copies returns the tables of each CopyFrom traced.
func (r *Tracer) Copies() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.copies)
}

// Connects returns how many connections were traced.
func (r *Tracer) Connects() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.connects
}

// PgreplicaOwn are fragments of the statements pgreplica sends on its
// own: the probe, the replay check, the capture of write positions, the
// question a new connection is asked of its server. No tracer should
// see them.
var PgreplicaOwn = []string{"pg_is_in_recovery", "pg_last_wal_replay_lsn", "pg_current_wal", "pg_control_system"}

// CheckNoneOwn fails t when tr traced any of PgreplicaOwn.
func CheckNoneOwn(t testing.TB, tr *Tracer) {
	t.Helper()
	for _, own := range PgreplicaOwn {
		if n := tr.Count(own); n != 0 {
			t.Errorf("pgreplica's own %s traced %d times: %q", own, n, tr.All())
		}
	}
}

// PasswordRole creates, on c's primary and replicated to every node, a
// role that logs in with password (SCRAM) over TCP, whatever else the
// cluster trusts, and that may see what the monitor reads (pg_monitor);
// the role and the rule go with the test.
func PasswordRole(t testing.TB, c *integration.Cluster, role, password string) {
	t.Helper()
	ctx := Ctx(t, 30*time.Second)
	// scram-sha-256 explicitly: PostgreSQL 13 stores md5 by default.
	if err := c.Exec(ctx, c.Primary(), "SET password_encryption = 'scram-sha-256'; DROP ROLE IF EXISTS "+role+
		"; CREATE ROLE "+role+" LOGIN PASSWORD '"+password+"'; GRANT pg_monitor TO "+role); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Exec(context.Background(), c.Primary(), "DROP ROLE IF EXISTS "+role); err != nil {
			t.Error(err)
		}
	})
	if err := c.SetHBA(ctx, "host all "+role+" all scram-sha-256"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.SetHBA(Ctx(t, 30*time.Second)); err != nil {
			t.Error(err)
		}
	})
	if err := c.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
}

// TerminateRole ends every session of role on every node of c and waits
// until they are gone: what uses the role next logs in again.
func TerminateRole(t testing.TB, c *integration.Cluster, role string) {
	t.Helper()
	ctx := Ctx(t, 30*time.Second)
	for i := range c.Len() {
		cut, err := c.QueryString(ctx, i, "SELECT now()::text")
		if err != nil {
			t.Fatal(err)
		}
		const sessions = "FROM pg_stat_activity WHERE usename = $1 AND backend_start <= $2::timestamptz"
		if err := c.Exec(ctx, i, "SELECT pg_terminate_backend(pid) "+sessions, role, cut); err != nil {
			t.Fatal(err)
		}
		err = WaitFor(ctx, fmt.Sprintf("the sessions of %s on node %d to end", role, i), func() (bool, string) {
			n, err := c.QueryString(ctx, i, "SELECT count(*)::text "+sessions, role, cut)
			return err == nil && n == "0", fmt.Sprint(n, err)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// AwaitProbes waits until every host of cn has answered n more probes.
func AwaitProbes(t testing.TB, cn *pgreplica.Connector, n int) {
	t.Helper()
	seen := map[string]time.Time{}
	counts := map[string]int{}
	err := WaitFor(Ctx(t, 20*time.Second), fmt.Sprintf("%d probes of every host", n), func() (bool, string) {
		done := true
		for _, s := range cn.Nodes() {
			if !s.Sampled.Equal(seen[s.Addr]) {
				seen[s.Addr] = s.Sampled
				counts[s.Addr]++
			}
			done = done && counts[s.Addr] > n
		}
		return done, fmt.Sprint(counts)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// AwaitHealthySince waits until every host of cn answered a probe sent
// after since, and fails t when one did with an error.
func AwaitHealthySince(t testing.TB, cn *pgreplica.Connector, since time.Time) {
	t.Helper()
	err := WaitFor(Ctx(t, 20*time.Second), "every host answering the monitor", func() (bool, string) {
		healthy := 0
		for _, s := range cn.Nodes() {
			if s.Err == nil && s.Sampled.After(since) {
				healthy++
			}
		}
		return healthy == len(cn.Nodes()), fmt.Sprintf("%+v", cn.Nodes())
	})
	if err != nil {
		t.Fatal(err)
	}
}

// AwaitRTT waits until every host of cn answered a probe that measured a
// round trip: the monitor's first two probes (the first on a new
// connection, which measures none) have answered.
func AwaitRTT(t testing.TB, cn *pgreplica.Connector) {
	t.Helper()
	err := WaitFor(Ctx(t, 20*time.Second), "every host probed twice", func() (bool, string) {
		ok := true
		for _, s := range cn.Nodes() {
			ok = ok && !s.Sampled.IsZero() && s.RTT > 0
		}
		return ok, fmt.Sprintf("%+v", cn.Nodes())
	})
	if err != nil {
		t.Fatal(err)
	}
}
