package drivertest

import (
	"strconv"
	"testing"

	"github.com/pgreplica/pgreplica"
)

// TestOneConnectionBeyondThePool: a process that writes and reads its
// writes back holds, on the primary, the connections its pool needs and
// one more, the monitor's, which captures of write positions borrow.
func TestOneConnectionBeyondThePool(t *testing.T) {
	for _, inner := range drivers {
		t.Run(inner, func(t *testing.T) {
			// read_after_write=replica: every read after a write reads
			// the write's position, on demand.
			db := open(t, inner, "pgreplica_read_after_write=replica")
			db.SetMaxOpenConns(1)
			ctx := ctxFor(t)
			tbl := table(t, db)
			for i := range 20 {
				if _, err := db.ExecContext(ctx, "INSERT INTO "+tbl+" (v) VALUES ($1)", strconv.Itoa(i)); err != nil {
					t.Fatal(err)
				}
				var n int
				if err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+tbl).Scan(&n); err != nil {
					t.Fatal(err)
				}
				if n != i+1 {
					t.Fatalf("read %d rows after writing %d", n, i+1)
				}
			}
			c, err := pgreplica.ConnectorOf(ctx, db)
			if err != nil {
				t.Fatal(err)
			}
			if s := c.Stats(); s.LSNCaptures == 0 {
				t.Fatalf("no write position was read (stats %+v)", s)
			}
			got, err := cluster.QueryString(ctx, cluster.Primary(),
				"SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", appName(t))
			if err != nil {
				t.Fatal(err)
			}
			// One pooled connection (one statement at a time) and the
			// monitor's.
			if got != "2" {
				t.Errorf("%s connections on the primary, want 2: the pool's and the monitor's", got)
			}
		})
	}
}
