package orm_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/pgreplica/pgreplica"
)

// items is what every library under test does to the items table (id
// bigint key, name text). Each implementation uses only its library's own
// API, so the scenarios exercise exactly the SQL and driver calls that
// library makes.
type items interface {
	// migrate creates the table, with the library's migration tool where
	// it has one.
	migrate(ctx context.Context) error
	// create inserts a row and returns its generated id.
	create(ctx context.Context, name string) (int64, error)
	// rename updates the row's name.
	rename(ctx context.Context, id int64, name string) error
	// name reads the row's name back.
	name(ctx context.Context, id int64) (string, error)
	// port runs SELECT inet_server_port() as a plain read.
	port(ctx context.Context) (int, error)
	// readOnlyTx reads the row's name and inet_server_port() in one
	// read-only transaction.
	readOnlyTx(ctx context.Context, id int64) (name string, port int, err error)
	// appendInTx reads the row's name FOR UPDATE and writes it back with
	// suffix appended, in one read-write transaction: a read that decides
	// a write. It returns inet_server_port() seen inside.
	appendInTx(ctx context.Context, id int64, suffix string) (port int, err error)
}

// testLibrary runs the scenarios every library must pass. db is the
// pgreplica *sql.DB under lib.
//
// With replay paused on every replica, writes made through lib with a
// session in ctx, or with no requirement at all (the connector's process
// watermark), are read back at once through lib: the primary serves them
// after the wait budget. With the replicas live again, the same plain reads
// and read-only transactions are served by replicas.
func testLibrary(t *testing.T, db *sql.DB, lib items) {
	ctx := ctxFor(t)
	conn := connectorOf(t, db)
	dropItems(t)
	// A migration reads the catalog to decide what to write: WithPrimary
	// (docs/orm.md) so that it never asks a replica that lags.
	if err := lib.migrate(pgreplica.WithPrimary(ctx)); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if err := cluster.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	resume := cluster.PauseReplicas(t)

	sess := pgreplica.NewSession()
	sctx := pgreplica.WithSession(ctx, sess)
	var sessionID int64

	t.Run("ReadYourWrites/Session", func(t *testing.T) {
		before := conn.Stats()
		id := mustCreate(t, lib, sctx, "alpha")
		sessionID = id
		if sess.LSN() == 0 {
			t.Fatal("the create did not raise the session's watermark")
		}
		wantName(t, lib, sctx, id, "alpha")
		if err := lib.rename(sctx, id, "beta"); err != nil {
			t.Fatalf("rename: %v", err)
		}
		wantName(t, lib, sctx, id, "beta")
		wantPrimary(t, lib, sctx)
		after := conn.Stats()
		if d := primaryServed(after) - primaryServed(before); d < 3 {
			t.Errorf("%d reads fell back to the primary, want at least 3 (two names and the port)", d)
		}
		if d := after.ReplicaReads - before.ReplicaReads; d != 0 {
			t.Errorf("%d reads were served by a paused replica", d)
		}

		// Replica only: a clear error rather than the stale row.
		_, err := lib.name(pgreplica.WithFallback(sctx, pgreplica.FallbackError), id)
		if !errors.Is(err, pgreplica.ErrNoFreshReplica) {
			t.Errorf("replica-only read with replay paused: %v, want ErrNoFreshReplica", err)
		}
		// Without a guarantee the read goes to a paused replica, which
		// has not got the row: what the session protects against.
		if name, err := lib.name(pgreplica.WithEventual(ctx), id); err == nil {
			t.Errorf("an eventual read found %q with replay paused; the replicas cannot have it", name)
		}
	})

	t.Run("ReadYourWrites/Background", func(t *testing.T) {
		// No requirement in ctx: the connector's process watermark, which
		// every write through db raises, gives read-your-writes.
		bg := context.Background()
		before := conn.Stats()
		id := mustCreate(t, lib, bg, "gamma")
		wantName(t, lib, bg, id, "gamma")
		if err := lib.rename(bg, id, "delta"); err != nil {
			t.Fatalf("rename: %v", err)
		}
		wantName(t, lib, bg, id, "delta")
		wantPrimary(t, lib, bg)
		after := conn.Stats()
		if d := primaryServed(after) - primaryServed(before); d < 3 {
			t.Errorf("%d reads fell back to the primary, want at least 3", d)
		}
		if d := after.ReplicaReads - before.ReplicaReads; d != 0 {
			t.Errorf("%d reads were served by a paused replica", d)
		}
	})

	t.Run("ReadOnlyTx/Paused", func(t *testing.T) {
		if sessionID == 0 {
			t.Skip("no row from the session scenario")
		}
		// A read-only transaction needs one replica fresh enough for the
		// whole transaction; with none, it runs on the primary.
		name, port, err := lib.readOnlyTx(sctx, sessionID)
		if err != nil {
			t.Fatalf("read-only transaction: %v", err)
		}
		if name != "beta" {
			t.Errorf("read-only transaction read %q, want %q", name, "beta")
		}
		if n := nodeOf(t, port); n != cluster.Primary() {
			t.Errorf("a read-only transaction ran on paused replica %d", n)
		}
	})

	t.Run("ReadThenWriteTx/Paused", func(t *testing.T) {
		if sessionID == 0 {
			t.Skip("no row from the session scenario")
		}
		testAppendInTx(t, lib, sctx, sessionID, "beta", "!")
	})

	// The session's position before the replicas resume, for a session
	// whose first read below is certain to find a replica.
	written, err := pgreplica.ParseToken(sess.Token())
	if err != nil {
		t.Fatal(err)
	}
	resume()
	if err := cluster.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}

	// Every requirement below is at most what the replicas replayed before
	// WaitCaughtUp returned, so a replica qualifies at once: none of these
	// reads may fall back.
	t.Run("ReadOnlyTx/Live", func(t *testing.T) {
		if sessionID == 0 {
			t.Skip("no row from the session scenario")
		}
		name, port, err := lib.readOnlyTx(sctx, sessionID)
		if err != nil {
			t.Fatalf("read-only transaction: %v", err)
		}
		if name != "beta!" {
			t.Errorf("read-only transaction read %q, want %q", name, "beta!")
		}
		if n := nodeOf(t, port); n == cluster.Primary() {
			t.Error("a read-only transaction ran on the primary with the replicas caught up")
		}
	})

	t.Run("Offload", func(t *testing.T) {
		if sessionID == 0 {
			t.Skip("no row from the session scenario")
		}
		bg := context.Background()
		before := conn.Stats()
		for range 3 {
			wantName(t, lib, bg, sessionID, "beta!")
		}
		wantReplica(t, lib, bg)
		after := conn.Stats()
		if d := after.ReplicaReads - before.ReplicaReads; d != 4 {
			t.Errorf("%d of 4 reads were served by replicas", d)
		}
		if d := after.FallbackReads - before.FallbackReads; d != 0 {
			t.Errorf("%d reads fell back to the primary with the replicas caught up", d)
		}

		// A session's replica read raises it to what that replica had
		// replayed (monotonic reads), which can be WAL written since
		// (the server's own, such as standby snapshots) that the other
		// replica has yet to replay: the next read may wait for it, and
		// on a loaded machine fall back. So only the first read of a
		// session at the written position is certain to find a replica.
		again := pgreplica.NewSession()
		if err := again.Merge(written); err != nil {
			t.Fatal(err)
		}
		actx := pgreplica.WithSession(ctx, again)
		before = after
		wantReplica(t, lib, actx)
		for range 3 {
			wantName(t, lib, actx, sessionID, "beta!")
		}
		after = conn.Stats()
		if d := after.ReplicaReads - before.ReplicaReads; d < 1 {
			t.Errorf("no read with the session was served by a replica")
		}
		if d := after.FallbackReads - before.FallbackReads; d != 0 {
			t.Logf("%d of 4 reads with the session fell back to the primary", d)
		}
	})

	t.Run("ReadThenWriteTx/Live", func(t *testing.T) {
		if sessionID == 0 {
			t.Skip("no row from the session scenario")
		}
		testAppendInTx(t, lib, sctx, sessionID, "beta!", "?")
	})

	// A write the classifier took for a read would still succeed: the
	// replica refuses it (SQLSTATE 25006) and the driver retries it on the
	// primary. Count those retries so that a misrouted statement of the
	// library (or of its migration) shows up here.
	if n := conn.Stats().ReadOnlyRetries; n != 0 {
		t.Errorf("%d statements were sent to a replica, refused as writes and retried on the primary", n)
	}
}

// testAppendInTx runs a read that decides a write in one read-write
// transaction and checks that it ran on the primary and that the session
// reads its result at once.
func testAppendInTx(t *testing.T, lib items, ctx context.Context, id int64, was, suffix string) {
	t.Helper()
	port, err := lib.appendInTx(ctx, id, suffix)
	if err != nil {
		t.Fatalf("read-then-write transaction: %v", err)
	}
	if n := nodeOf(t, port); n != cluster.Primary() {
		t.Errorf("a read-write transaction ran on node %d, want the primary", n)
	}
	wantName(t, lib, ctx, id, was+suffix)
}

func mustCreate(t *testing.T, lib items, ctx context.Context, name string) int64 {
	t.Helper()
	id, err := lib.create(ctx, name)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if id == 0 {
		t.Fatal("create returned no id")
	}
	return id
}

func wantName(t *testing.T, lib items, ctx context.Context, id int64, want string) {
	t.Helper()
	got, err := lib.name(ctx, id)
	if err != nil {
		t.Fatalf("read of row %d right after writing %q: %v", id, want, err)
	}
	if got != want {
		t.Fatalf("read of row %d right after the write: %q, want %q", id, got, want)
	}
}

func wantPrimary(t *testing.T, lib items, ctx context.Context) {
	t.Helper()
	port, err := lib.port(ctx)
	if err != nil {
		t.Fatalf("inet_server_port: %v", err)
	}
	if n := nodeOf(t, port); n != cluster.Primary() {
		t.Errorf("a read after the write ran on paused replica %d", n)
	}
}

func wantReplica(t *testing.T, lib items, ctx context.Context) {
	t.Helper()
	port, err := lib.port(ctx)
	if err != nil {
		t.Fatalf("inet_server_port: %v", err)
	}
	if n := nodeOf(t, port); n == cluster.Primary() {
		t.Error("a plain read ran on the primary with the replicas caught up")
	}
}

// primaryServed counts the reads the primary served because no replica
// could: fallbacks, and reads of writes too young for any replica.
func primaryServed(s pgreplica.Stats) int64 { return s.FallbackReads + s.RecentWriteReads }
