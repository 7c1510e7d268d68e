package pgxtest

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration/pgxtest/authors"
)

// TestGuardedReadsBehind: the router's view of the replicas is an hour
// old, so a session read after a write sends the freshness check in the
// read's own flight, to a replica whose replay is paused. The check finds
// it behind; the read is sent again where the write is (here the primary,
// after the wait budget) and sees it — for a query, a batch of reads and
// a read-only transaction, whose statements, savepoints and commit then
// work as pgx's. Once replay resumes, the same reads run on replicas.
func TestGuardedReadsBehind(t *testing.T) {
	pool, q := open(t, "tuning_monitor_interval=1h")
	ctx := ctxFor(t)
	resume := cluster.PauseReplicas(t)
	sess := pgreplica.NewSession()
	sctx := pgreplica.WithSession(ctx, sess)

	reads := []struct {
		name string
		run  func(ctx context.Context, id int64) (name string, port int32, err error)
	}{
		{"query", func(ctx context.Context, id int64) (string, int32, error) {
			a, err := q.GetAuthor(ctx, id)
			return a.Name, a.Port, err
		}},
		{"batch", func(ctx context.Context, id int64) (name string, port int32, err error) {
			br := q.GetAuthors(ctx, []int64{id, id})
			br.QueryRow(func(_ int, a authors.GetAuthorsRow, qerr error) {
				name, port, err = a.Name, a.Port, qerr
			})
			return name, port, errors.Join(err, br.Close())
		}},
		{"read-only transaction", func(ctx context.Context, id int64) (string, int32, error) {
			tx, err := pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead})
			if err != nil {
				return "", 0, err
			}
			defer tx.Rollback(ctx)
			sp, err := tx.Begin(ctx)
			if err != nil {
				return "", 0, err
			}
			if _, err := sp.Exec(ctx, "SELECT 1/0"); err == nil {
				return "", 0, errors.New("SELECT 1/0 succeeded")
			}
			if err := sp.Rollback(ctx); err != nil {
				return "", 0, err
			}
			a, err := q.WithTx(tx).GetAuthor(ctx, id)
			if err != nil {
				return "", 0, err
			}
			if err := tx.Commit(ctx); err != nil {
				return "", 0, err
			}
			if err := tx.Commit(ctx); err != pgx.ErrTxClosed {
				t.Errorf("Commit after Commit: %v, want pgx.ErrTxClosed", err)
			}
			return a.Name, a.Port, nil
		}},
	}
	for _, r := range reads {
		want := "behind " + r.name
		created, err := q.CreateAuthor(sctx, authors.CreateAuthorParams{Name: want})
		if err != nil {
			t.Fatal(err)
		}
		sess.LSN() // the write's position known, as a moment later (not a read right after it)
		name, port, err := r.run(sctx, created.ID)
		if err != nil {
			t.Fatalf("%s after a write, replay paused: %v", r.name, err)
		}
		if name != want {
			t.Fatalf("%s read %q, want its own write %q", r.name, name, want)
		}
		if n := nodeOf(t, port); n != cluster.Primary() {
			t.Fatalf("%s ran on node %d, which lacks the write", r.name, n)
		}
	}
	if s := pool.Stat(); s.FallbackReads < int64(len(reads)) {
		t.Errorf("%d reads fell back to the primary, want %d", s.FallbackReads, len(reads))
	}

	resume()
	if err := cluster.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	for _, r := range reads {
		want := "fresh " + r.name
		created, err := q.CreateAuthor(sctx, authors.CreateAuthorParams{Name: want})
		if err != nil {
			t.Fatal(err)
		}
		if err := cluster.WaitCaughtUp(ctx); err != nil {
			t.Fatal(err)
		}
		name, port, err := r.run(sctx, created.ID)
		if err != nil || name != want {
			t.Fatalf("%s after replay resumed: %q, %v; want %q", r.name, name, err, want)
		}
		if n := nodeOf(t, port); n == cluster.Primary() {
			t.Fatalf("%s ran on the primary although the replicas have the write", r.name)
		}
	}
}

// TestReplicaTxAsPgx: a read-only transaction the handle began with its
// check in BEGIN's flight (a write just before, the router's view an hour
// old) behaves as one pgx.Conn.BeginTx began on a replica: the same
// errors after a failed statement, after Commit and Rollback, in
// savepoints, and large objects that read.
func TestReplicaTxAsPgx(t *testing.T) {
	pool, _ := open(t, "tuning_monitor_interval=1h")
	ctx := ctxFor(t)
	sess := pgreplica.NewSession()
	sctx := pgreplica.WithSession(ctx, sess)
	// A large object, written on the primary and replayed.
	wtx, err := pool.Begin(sctx)
	if err != nil {
		t.Fatal(err)
	}
	wlos := wtx.LargeObjects()
	oid, err := wlos.Create(sctx, 0)
	if err == nil {
		var lo *pgx.LargeObject
		if lo, err = wlos.Open(sctx, oid, pgx.LargeObjectModeWrite); err == nil {
			_, err = lo.Write([]byte("large"))
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := wtx.Commit(sctx); err != nil {
		t.Fatal(err)
	}
	sess.LSN()
	if err := cluster.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	direct, err := pgx.Connect(ctx, cluster.NodeDSN(1))
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close(ctx)

	ro := pgx.TxOptions{AccessMode: pgx.ReadOnly}
	type outcome []string
	run := func(begin func() (pgx.Tx, error)) outcome {
		var out outcome
		note := func(err error) {
			if err == nil {
				out = append(out, "ok")
			} else {
				out = append(out, err.Error())
			}
		}
		// A statement fails; Commit then reports the rollback.
		tx, err := begin()
		if err != nil {
			t.Fatal(err)
		}
		_, err = tx.Exec(sctx, "SELECT 1/0")
		note(err)
		note(tx.Commit(sctx))
		note(tx.Rollback(sctx))
		_, err = tx.Exec(sctx, "SELECT 1")
		note(err)
		note(tx.QueryRow(sctx, "SELECT 1").Scan(new(int)))

		// Savepoints, and large objects that read.
		tx, err = begin()
		if err != nil {
			t.Fatal(err)
		}
		sp, err := tx.Begin(sctx)
		note(err)
		_, err = sp.Exec(sctx, "SELECT 1/0")
		note(err)
		note(sp.Rollback(sctx))
		note(sp.Commit(sctx))
		los := tx.LargeObjects()
		lo, err := los.Open(sctx, oid, pgx.LargeObjectModeRead)
		note(err)
		if err == nil {
			buf := make([]byte, 16)
			n, err := lo.Read(buf)
			if err != nil && err.Error() != "EOF" {
				note(err)
			}
			out = append(out, string(buf[:n]))
		}
		var one int
		note(tx.QueryRow(sctx, "SELECT 1").Scan(&one))
		note(tx.Commit(sctx))
		_, err = los.Open(sctx, oid, pgx.LargeObjectModeRead)
		note(err)
		return out
	}
	want := run(func() (pgx.Tx, error) { return direct.BeginTx(sctx, ro) })
	got := run(func() (pgx.Tx, error) {
		// A write the router cannot know a replica has: the check then
		// goes with BEGIN.
		if _, err := pool.Exec(sctx, "INSERT INTO authors (name) VALUES ('tx')"); err != nil {
			return nil, err
		}
		sess.LSN()
		if err := cluster.WaitCaughtUp(ctx); err != nil {
			return nil, err
		}
		return pool.BeginTx(sctx, ro)
	})
	if len(got) != len(want) {
		t.Fatalf("through the handle:\n%q\ndirectly:\n%q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("step %d: %q through the handle, %q directly", i, got[i], want[i])
		}
	}
	t.Logf("%q", got)
}
