package pgxtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration/pgxtest/authors"
	"github.com/pgreplica/pgreplica/pgreplicapgx"
)

// TestSqlcReadYourWritesWithPausedReplicas: sqlc's generated code through
// the handle, with replay paused on every replica, reads what it just
// wrote (INSERT … RETURNING, UPDATE, COPY, a batch of updates), with
// context.Background() (the process default) and with a Session; a
// replica-only read says so instead of returning stale data; once replay
// resumes, reads go to the replicas again.
func TestSqlcReadYourWritesWithPausedReplicas(t *testing.T) {
	_, q := open(t)
	ctx := ctxFor(t)
	sess := pgreplica.NewSession()
	sctx := pgreplica.WithSession(ctx, sess)
	resume := cluster.PauseReplicas(t)

	created, err := q.CreateAuthor(sctx, authors.CreateAuthorParams{Name: "ada", Bio: pgtype.Text{String: "v1", Valid: true}})
	if err != nil {
		t.Fatal(err)
	}
	if n := nodeOf(t, created.Port); n != cluster.Primary() {
		t.Fatalf("INSERT … RETURNING ran on node %d", n)
	}
	for name, c := range map[string]context.Context{"process": context.Background(), "session": sctx} {
		a, err := q.GetAuthor(c, created.ID)
		if err != nil {
			t.Fatalf("%s read after write with replay paused: %v", name, err)
		}
		if a.Name != "ada" || nodeOf(t, a.Port) != cluster.Primary() {
			t.Fatalf("%s read: %+v, want ada from the primary", name, a)
		}
	}
	if err := q.UpdateAuthorBio(sctx, authors.UpdateAuthorBioParams{ID: created.ID, Bio: pgtype.Text{String: "v2", Valid: true}}); err != nil {
		t.Fatal(err)
	}
	if a, err := q.GetAuthor(sctx, created.ID); err != nil || a.Bio.String != "v2" {
		t.Fatalf("read after UPDATE: %+v, %v; want v2", a, err)
	}
	n, err := q.CopyAuthors(sctx, []authors.CopyAuthorsParams{{Name: "b"}, {Name: "c"}, {Name: "d"}})
	if err != nil || n != 3 {
		t.Fatalf("CopyFrom: %d, %v", n, err)
	}
	if c, err := q.CountAuthors(sctx); err != nil || c != 4 {
		t.Fatalf("count after COPY: %d, %v; want 4", c, err)
	}
	ub := q.UpdateBios(sctx, []authors.UpdateBiosParams{{ID: created.ID, Bio: pgtype.Text{String: "v3", Valid: true}}})
	ub.Exec(func(_ int, err error) {
		if err != nil {
			t.Error(err)
		}
	})
	if err := ub.Close(); err != nil {
		t.Fatal(err)
	}
	if a, err := q.GetAuthor(sctx, created.ID); err != nil || a.Bio.String != "v3" {
		t.Fatalf("read after a batch of updates: %+v, %v; want v3", a, err)
	}
	_, err = q.GetAuthor(pgreplica.WithFallback(sctx, pgreplica.FallbackError), created.ID)
	if !errors.Is(err, pgreplica.ErrNoFreshReplica) {
		t.Fatalf("replica-only read with replay paused: %v, want ErrNoFreshReplica", err)
	}

	resume()
	onReplica(t, func() (int32, error) {
		a, err := q.GetAuthor(sctx, created.ID)
		if err == nil && a.Bio.String != "v3" {
			t.Fatalf("replica read after resume: %+v, want v3", a)
		}
		return a.Port, err
	})
}

// TestBatchRouting: a batch of reads runs on one replica; a batch with a
// write runs on the primary.
func TestBatchRouting(t *testing.T) {
	pool, q := open(t)
	ctx := ctxFor(t)
	created, err := q.CreateAuthor(ctx, authors.CreateAuthorParams{Name: "ada"})
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	var ports []int32
	onReplica(t, func() (int32, error) {
		ports = ports[:0]
		br := q.GetAuthors(ctx, []int64{created.ID, created.ID})
		br.QueryRow(func(_ int, a authors.GetAuthorsRow, err error) {
			if err != nil {
				t.Fatal(err)
			}
			ports = append(ports, a.Port)
		})
		return ports[0], br.Close()
	})
	if ports[0] != ports[1] {
		t.Fatalf("a batch of reads ran on two servers: %v", ports)
	}
	b := &pgx.Batch{}
	b.Queue("SELECT inet_server_port()")
	b.Queue("UPDATE authors SET bio = 'x' WHERE id = $1", created.ID)
	br := pool.SendBatch(ctx, b)
	var port int32
	if err := br.QueryRow().Scan(&port); err != nil {
		t.Fatal(err)
	}
	if _, err := br.Exec(); err != nil {
		t.Fatal(err)
	}
	if err := br.Close(); err != nil {
		t.Fatal(err)
	}
	if n := nodeOf(t, port); n != cluster.Primary() {
		t.Fatalf("a batch with a write ran on node %d", n)
	}
}

// TestBatchBeginTx: a batch that begins a transaction (pgx.Batch.BeginTx)
// holds its connection until the transaction ends, and its write is read
// back while replay is paused.
func TestBatchBeginTx(t *testing.T) {
	pool, q := open(t)
	ctx := ctxFor(t)
	cluster.PauseReplicas(t)
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	b.Queue("INSERT INTO authors (name) VALUES ('in batch tx') RETURNING id")
	br := pool.SendBatch(ctx, b)
	tx := br.Tx()
	if tx == nil {
		t.Fatal("no transaction from a batch that began one")
	}
	defer tx.Rollback(ctx)
	if _, err := br.Exec(); err != nil {
		t.Fatal(err)
	}
	var id int64
	if err := br.QueryRow().Scan(&id); err != nil {
		t.Fatal(err)
	}
	if err := br.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if a, err := q.GetAuthor(context.Background(), id); err != nil || a.Name != "in batch tx" {
		t.Fatalf("read after a batch transaction: %+v, %v", a, err)
	}
}

// TestReadOnlyTx: a read-only transaction runs on a replica when one has
// what the context needs, on the primary while none does; a read-write
// one on the primary, and its commit is read back.
func TestReadOnlyTx(t *testing.T) {
	pool, q := open(t)
	ctx := ctxFor(t)
	sess := pgreplica.NewSession()
	sctx := pgreplica.WithSession(ctx, sess)
	txPort := func(ctx context.Context, opts pgx.TxOptions) (int32, error) {
		tx, err := pool.BeginTx(ctx, opts)
		if err != nil {
			return 0, err
		}
		defer tx.Rollback(ctx)
		var port int32
		if err := tx.QueryRow(ctx, "SELECT inet_server_port()").Scan(&port); err != nil {
			return 0, err
		}
		return port, tx.Commit(ctx)
	}
	ro := pgx.TxOptions{AccessMode: pgx.ReadOnly}
	onReplica(t, func() (int32, error) { return txPort(sctx, ro) })
	if p, err := txPort(sctx, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.Serializable}); err != nil || nodeOf(t, p) != cluster.Primary() {
		t.Fatalf("serializable read-only transaction: port %d, %v; want the primary", p, err)
	}

	cluster.PauseReplicas(t)
	tx, err := pool.Begin(sctx)
	if err != nil {
		t.Fatal(err)
	}
	qtx := q.WithTx(tx)
	created, err := qtx.CreateAuthor(sctx, authors.CreateAuthorParams{Name: "in tx"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(sctx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(sctx); !errors.Is(err, pgx.ErrTxClosed) {
		t.Fatalf("Rollback after Commit: %v, want pgx.ErrTxClosed", err)
	}
	rtx, err := pool.BeginTx(sctx, ro)
	if err != nil {
		t.Fatal(err)
	}
	a, err := q.WithTx(rtx).GetAuthor(sctx, created.ID)
	if err != nil {
		t.Fatalf("read-only transaction after a commit with replay paused: %v", err)
	}
	if nodeOf(t, a.Port) != cluster.Primary() {
		t.Fatalf("read-only transaction ran on node %d, which lacks the write", nodeOf(t, a.Port))
	}
	if err := rtx.Commit(sctx); err != nil {
		t.Fatal(err)
	}
}

// TestAcquireSessionState: session state set on a connection from Acquire
// stays there while it is held and reaches nobody after Release.
func TestAcquireSessionState(t *testing.T) {
	pool, _ := open(t)
	ctx := ctxFor(t)
	c, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "CREATE TEMP TABLE scratch (v int)"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "SET application_name = 'pinned'"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "INSERT INTO scratch VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM scratch").Scan(&n); err != nil || n != 1 {
		t.Fatalf("temp table on the held connection: %d, %v", n, err)
	}
	if _, err := c.Exec(ctx, "SELECT pg_advisory_lock(42)"); err != nil {
		t.Fatal(err)
	}
	if !advisoryLockHeld(t, pool) {
		t.Fatal("the held connection's advisory lock is not in pg_locks")
	}
	c.Release()
	c.Release() // harmless
	// Every pooled primary connection is fresh: the held one was closed.
	for range 4 {
		var name string
		if err := pool.QueryRow(pgreplica.WithPrimary(ctx), "SELECT current_setting('application_name')").Scan(&name); err != nil {
			t.Fatal(err)
		}
		if name == "pinned" {
			t.Fatal("a connection with session state went back to the pool")
		}
	}
	// The advisory lock goes with the closed session: the server frees
	// it when that session's backend ends, a moment after the close (the
	// pool closes in the background, as pgxpool's does).
	deadline := time.Now().Add(5 * time.Second)
	for advisoryLockHeld(t, pool) {
		if time.Now().After(deadline) {
			t.Fatal("advisory lock still held 5 s after Release: the session was not closed")
		}
		time.Sleep(10 * time.Millisecond) // polling the server's lock table
	}
}

// advisoryLockHeld reports whether a session holds advisory lock 42 on
// the primary.
func advisoryLockHeld(t *testing.T, pool *pgreplicapgx.Pool) bool {
	t.Helper()
	var held bool
	if err := pool.QueryRow(pgreplica.WithPrimary(ctxFor(t)),
		"SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objid = 42)").Scan(&held); err != nil {
		t.Fatal(err)
	}
	return held
}

// TestErrorsArePgx: pgx's errors pass through untouched.
func TestErrorsArePgx(t *testing.T) {
	pool, q := open(t)
	ctx := ctxFor(t)
	if _, err := q.GetAuthor(ctx, -1); !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("missing row: %v, want pgx.ErrNoRows", err)
	}
	var pgErr *pgconn.PgError
	if _, err := pool.Exec(ctx, "INSERT INTO authors (id, name) VALUES (1, 'a'), (1, 'b')"); !errors.As(err, &pgErr) || pgErr.Code != "23505" {
		t.Fatalf("unique violation: %v, want a *pgconn.PgError 23505", err)
	}
	if _, err := pool.Query(ctx, "SELEC 1"); !errors.As(err, &pgErr) || pgErr.Code != "42601" {
		t.Fatalf("syntax error: %v, want a *pgconn.PgError 42601", err)
	}
	rows, err := pool.Query(ctx, "SELECT 1/(g-3) FROM generate_series(1, 5) g")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
	}
	if err := rows.Err(); !errors.As(err, &pgErr) || pgErr.Code != "22012" {
		t.Fatalf("division by zero mid-rows: %v, want a *pgconn.PgError 22012", err)
	}
	// The connections are fine afterwards.
	if _, err := q.ListAuthors(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestTypesAsPgxpool: rows scan into the same Go types as with pgxpool,
// pgx's generic helpers included.
func TestTypesAsPgxpool(t *testing.T) {
	pool, _ := open(t)
	ctx := ctxFor(t)
	rows, err := pool.Query(ctx, "SELECT g AS n, 'x' || g AS s, now() AS at, ARRAY[g, g] AS a FROM generate_series(1, 3) g")
	if err != nil {
		t.Fatal(err)
	}
	type rec struct {
		N  int32
		S  string
		At pgtype.Timestamptz
		A  []int32
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByName[rec])
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[2].N != 3 || got[2].S != "x3" || len(got[2].A) != 2 || !got[2].At.Valid {
		t.Fatalf("collected %+v", got)
	}
	rows, err = pool.Query(ctx, "SELECT 1::int8, 'a'::text, true, NULL::int4")
	if err != nil {
		t.Fatal(err)
	}
	vals, err := pgx.CollectExactlyOneRow(rows, func(r pgx.CollectableRow) ([]any, error) { return r.Values() })
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := vals[0].(int64); !ok {
		t.Errorf("int8 as %T", vals[0])
	}
	if _, ok := vals[1].(string); !ok {
		t.Errorf("text as %T", vals[1])
	}
	if _, ok := vals[2].(bool); !ok {
		t.Errorf("bool as %T", vals[2])
	}
	if vals[3] != nil {
		t.Errorf("NULL as %v", vals[3])
	}
}
