package drivertest

import (
	"database/sql"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
)

// primaryFacts returns the cluster's system identifier and the primary's
// insert position now.
func primaryFacts(t *testing.T) (sysid uint64, now pgreplica.LSN) {
	t.Helper()
	ctx := ctxFor(t)
	s, err := cluster.QueryString(ctx, cluster.Primary(), "SELECT system_identifier::text FROM pg_control_system()")
	if err != nil {
		t.Fatal(err)
	}
	if sysid, err = strconv.ParseUint(s, 10, 64); err != nil {
		t.Fatal(err)
	}
	if s, err = cluster.QueryString(ctx, cluster.Primary(), "SELECT pg_current_wal_insert_lsn()::text"); err != nil {
		t.Fatal(err)
	}
	if now, err = pgreplica.ParseLSN(s); err != nil {
		t.Fatal(err)
	}
	return sysid, now
}

// TestPositionAheadOfPrimaryNotWaitedOn: a read whose token (WithToken,
// or merged into a Session) claims a position ahead of everything the
// primary has written runs on a replica without waiting out the wait
// budget (2 s here) and without falling back to the primary: no replica
// could ever reach it, and the writes the read must see are at or below
// the primary's position, to which it is lowered. Overflow, which
// requires the highest LSN, is served the same way.
func TestPositionAheadOfPrimaryNotWaitedOn(t *testing.T) {
	for _, inner := range drivers {
		t.Run(inner, func(t *testing.T) {
			db := open(t, inner, "pgreplica_wait_budget=2s")
			c, err := pgreplica.ConnectorOf(ctxFor(t), db)
			if err != nil {
				t.Fatal(err)
			}
			if err := cluster.WaitCaughtUp(ctxFor(t)); err != nil {
				t.Fatal(err)
			}
			sysid, now := primaryFacts(t)
			far := now + 1<<40
			tokens := map[string]pgreplica.Token{
				"far future":             {LSN: far, SystemID: sysid},
				"far future, no cluster": {LSN: far},
				"highest LSN":            {LSN: ^pgreplica.LSN(0), SystemID: sysid},
				"overflow":               {LSN: 5, SystemID: sysid + 1, Overflow: true},
			}
			for name, tok := range tokens {
				for _, how := range []string{"WithToken", "Session"} {
					ctx := ctxFor(t)
					if how == "WithToken" {
						ctx = pgreplica.WithToken(ctx, tok)
					} else {
						s := pgreplica.NewSession()
						if err := s.Merge(tok); err != nil {
							t.Fatal(err)
						}
						ctx = pgreplica.WithSession(ctx, s)
					}
					before := c.Stats()
					start := time.Now()
					n := servedBy(t, db, ctx, "SELECT inet_server_port()")
					took := time.Since(start)
					after := c.Stats()
					if n == cluster.Primary() || after.FallbackReads != before.FallbackReads {
						t.Errorf("%s through %s: ran on node %d (primary %d), %d fallbacks", name, how, n,
							cluster.Primary(), after.FallbackReads-before.FallbackReads)
					}
					if took >= time.Second {
						t.Errorf("%s through %s: took %v, as if it waited for the position", name, how, took)
					}
				}
			}
		})
	}
}

// TestPositionOfAnotherProcessHonoured: a token of a write made a moment
// ago outside this process is ahead of every position the process knows
// of the primary, but the primary has written it: it is not lowered. With
// replay paused the read cannot find it on a replica and reads it on the
// primary. The monitor probes once an hour, so what the process knows of
// the primary is older than the write (the replicas have it).
func TestPositionOfAnotherProcessHonoured(t *testing.T) {
	for _, inner := range drivers {
		t.Run(inner, func(t *testing.T) {
			ctx := ctxFor(t)
			name := "unwritten_" + inner
			if err := cluster.Exec(ctx, cluster.Primary(), "DROP TABLE IF EXISTS "+name+"; CREATE TABLE "+name+" (v text)"); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { mustExec(t, cluster.Primary(), "DROP TABLE IF EXISTS "+name) })
			// The table is made outside the handle too, so that it has no
			// write of its own to wait for.
			db := open(t, inner, "pgreplica_wait_budget=50ms", "tuning_monitor_interval=1h")
			if err := cluster.WaitCaughtUp(ctx); err != nil {
				t.Fatal(err)
			}
			cluster.PauseReplicas(t)
			if err := cluster.Exec(ctx, cluster.Primary(), "INSERT INTO "+name+" (v) VALUES ('elsewhere')"); err != nil {
				t.Fatal(err)
			}
			sysid, pos := primaryFacts(t)
			var v string
			err := db.QueryRowContext(pgreplica.WithToken(ctx, pgreplica.Token{LSN: pos, SystemID: sysid}),
				"SELECT v FROM "+name).Scan(&v)
			if errors.Is(err, sql.ErrNoRows) || v != "elsewhere" {
				t.Fatalf("read with the token of a write elsewhere: %q, %v", v, err)
			}
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
