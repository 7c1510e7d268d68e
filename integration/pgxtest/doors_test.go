package pgxtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration/itest"
	"github.com/pgreplica/pgreplica/pgreplicapgx"
)

// door is one front door of the router: database/sql or the pgx handle.
type door interface {
	exec(ctx context.Context, sql string) error
	read(ctx context.Context, sql string) error
	connector() *pgreplica.Connector
}

type sqlDoor struct{ db *sql.DB }

func (d sqlDoor) exec(ctx context.Context, q string) error {
	_, err := d.db.ExecContext(ctx, q)
	return err
}

func (d sqlDoor) read(ctx context.Context, q string) error {
	var v any
	return d.db.QueryRowContext(ctx, q).Scan(&v)
}

func (d sqlDoor) connector() *pgreplica.Connector {
	c, err := pgreplica.ConnectorOf(context.Background(), d.db)
	if err != nil {
		panic(err)
	}
	return c
}

type pgxDoor struct{ p *pgreplicapgx.Pool }

func (d pgxDoor) exec(ctx context.Context, q string) error {
	_, err := d.p.Exec(ctx, q)
	return err
}

func (d pgxDoor) read(ctx context.Context, q string) error {
	var v any
	return d.p.QueryRow(ctx, q).Scan(&v)
}

func (d pgxDoor) connector() *pgreplica.Connector { return d.p.Connector() }

// TestBothDoorsCountAlike runs one workload through database/sql and
// through pgreplicapgx, each on a connector of its own, and compares what
// their Stats count: the two doors share one fault path (affinity, the
// retry policy and its counters), so the same faults count the same. The
// workload: replica reads, reads the statement sends to the primary,
// reads after a write with replay paused (falling back, or failing with
// FallbackError), a statement a replica refuses as a write, and one every
// replica cancels as a replay conflict.
func TestBothDoorsCountAlike(t *testing.T) {
	cluster.Need(t)
	ctx := ctxFor(t)
	for _, s := range []string{
		"DROP TABLE IF EXISTS pgr_doors; CREATE TABLE pgr_doors (v int)",
		"CREATE OR REPLACE FUNCTION pgr_doors_write() RETURNS int LANGUAGE sql AS $$ INSERT INTO pgr_doors VALUES (1) RETURNING 1 $$",
		`CREATE OR REPLACE FUNCTION pgr_doors_conflict() RETURNS int LANGUAGE plpgsql AS $$
		BEGIN
			IF pg_is_in_recovery() THEN
				RAISE EXCEPTION 'canceling statement due to conflict with recovery' USING ERRCODE = '40001';
			END IF;
			RETURN 1;
		END $$`,
	} {
		if err := cluster.Exec(ctx, cluster.Primary(), s); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = cluster.Exec(context.Background(), cluster.Primary(), "DROP FUNCTION IF EXISTS pgr_doors_write(); DROP FUNCTION IF EXISTS pgr_doors_conflict(); DROP TABLE IF EXISTS pgr_doors")
	})
	// Reads after a write resolve its position and wait for a replica
	// (not the primary at once because the write is young: that depends
	// on timing).
	dsn := cluster.DSN() + "&application_name=" + appName(t) + "&tuning_wait_after_write=true"

	db, _ := itest.Open(t, dsn+"&pgreplica_driver=pgx") // pinged: its monitor probes from now on
	pool, err := itest.NewPgx(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := pool.Ping(ctx); err != nil {
		t.Fatal(err)
	}

	got := map[string]pgreplica.Stats{}
	for name, d := range map[string]door{"database/sql": sqlDoor{db}, "pgreplicapgx": pgxDoor{pool}} {
		runDoorWorkload(t, ctx, d)
		got[name] = d.connector().Stats()
	}
	a, b := counted(got["database/sql"]), counted(got["pgreplicapgx"])
	t.Logf("database/sql: %+v", a)
	t.Logf("pgreplicapgx: %+v", b)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("the doors count the same workload differently:\ndatabase/sql  %+v\npgreplicapgx  %+v", a, b)
	}
	want := doorCounts{ReplicaReads: 10, PrimaryReads: 5, FallbackReads: 7, FallbackTimeout: 5, FallbackConflict: 2,
		FailedTimeout: 3, ReadOnlyRetries: 1, ConflictRetries: 2, ConflictsAvoided: 1}
	if a != want {
		t.Errorf("database/sql counted %+v, want %+v", a, want)
	}
}

// doorCounts are the Stats a workload decides, whatever the timing.
type doorCounts struct {
	ReplicaReads, PrimaryReads, FallbackReads          int64
	FallbackTimeout, FallbackConflict, FailedTimeout   int64
	ReadOnlyRetries, ConflictRetries, ConflictsAvoided int64
}

func counted(s pgreplica.Stats) doorCounts {
	return doorCounts{
		ReplicaReads: s.ReplicaReads, PrimaryReads: s.PrimaryReads, FallbackReads: s.FallbackReads,
		FallbackTimeout: s.Fallbacks[pgreplica.ReasonTimeout], FallbackConflict: s.Fallbacks[pgreplica.ReasonConflict],
		FailedTimeout:   s.FailedReads[pgreplica.ReasonTimeout],
		ReadOnlyRetries: s.ReadOnlyRetries, ConflictRetries: s.ConflictRetries, ConflictsAvoided: s.ConflictsAvoided,
	}
}

// runDoorWorkload is the workload of TestBothDoorsCountAlike.
func runDoorWorkload(t *testing.T, ctx context.Context, d door) {
	t.Helper()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	if err := cluster.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	awaitReplicas(t, d.connector(), false)
	eventual := pgreplica.WithEventual(ctx)
	for range 10 {
		must("eventual read", d.read(eventual, "SELECT 1"))
	}
	for range 5 {
		must("primary read", d.read(pgreplica.WithPrimary(ctx), "SELECT 1"))
	}

	resume := cluster.PauseReplicas(t)
	awaitReplicas(t, d.connector(), true)
	must("write", d.exec(ctx, "INSERT INTO pgr_doors VALUES (0)"))
	for range 5 {
		must("read after the write, replay paused", d.read(ctx, "SELECT count(*) FROM pgr_doors"))
	}
	for range 3 {
		err := d.read(pgreplica.WithFallback(ctx, pgreplica.FallbackError), "SELECT count(*) FROM pgr_doors")
		if !errors.Is(err, pgreplica.ErrNoFreshReplica) {
			t.Fatalf("replica-only read with replay paused: %v, want ErrNoFreshReplica", err)
		}
	}
	resume()
	if err := cluster.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	awaitReplicas(t, d.connector(), false)

	for range 2 { // refused once, remembered
		must("a writing function", d.read(eventual, "SELECT pgr_doors_write()"))
	}
	for range 2 { // cancelled on both replicas, then remembered
		must("a conflicting read", d.read(eventual, "SELECT pgr_doors_conflict()"))
	}
}

// awaitReplicas waits until c's probes have seen every replica's replay
// paused (or every one running and caught up with the primary's position
// now).
func awaitReplicas(t *testing.T, c *pgreplica.Connector, paused bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, ok := 0, true
		for _, ns := range c.Nodes() {
			if ns.Role == pgreplica.RoleReplica {
				n++
				ok = ok && ns.ReplayPaused == paused
			}
		}
		if n == cluster.Len()-1 && ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(fmt.Sprintf("the connector never saw its replicas with replay paused = %v: %+v", paused, c.Nodes()))
		}
		time.Sleep(10 * time.Millisecond) // the monitor probes every 250 ms
	}
}
