package bench

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
)

// readPlacement counts, from a pgreplica handle's Stats, where its reads
// ran and how long reads that needed a position waited for a fresh
// replica. The write-then-read benchmarks report it beside their times,
// because the same latency can come from a replica that was fresh at once,
// from a wait, or from the primary: the figures say which the driver did.
type readPlacement struct {
	replica int64         // reads served by a replica
	primary int64         // by the primary: required, or fallen back
	wait    time.Duration // total time spent waiting for a fresh replica
}

func placementOf(tb testing.TB, db *sql.DB) readPlacement {
	tb.Helper()
	c, err := pgreplica.ConnectorOf(context.Background(), db)
	if err != nil {
		tb.Fatal(err)
	}
	st := c.Stats()
	return readPlacement{
		replica: st.ReplicaReads,
		primary: st.PrimaryReads + st.FallbackReads + st.RecentWriteReads,
		wait:    st.Wait.Sum,
	}
}

// report reports, for the reads since earlier: primary-share, the share
// of them the primary served, and wait-ms/read, the mean time a read
// waited for a fresh replica.
func (p readPlacement) report(b *testing.B, earlier readPlacement) {
	reads := p.replica - earlier.replica + p.primary - earlier.primary
	if reads <= 0 {
		return
	}
	b.ReportMetric(float64(p.primary-earlier.primary)/float64(reads), "primary-share")
	b.ReportMetric(float64(p.wait-earlier.wait)/float64(time.Millisecond)/float64(reads), "wait-ms/read")
}
