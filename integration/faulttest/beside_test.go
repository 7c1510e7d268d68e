package faulttest

import (
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration"
	"github.com/pgreplica/pgreplica/integration/itest"
)

// TestPositionReadBesideTheRead: a read that needs its process's last
// write, whose position nobody read yet, reads that position on the
// primary while the read itself flies to a replica with its replay check
// (pgx inside, both doors): with every link 60 ms slower, it answers in about one
// slow round trip, not two (the position first, then the read).
func TestPositionReadBesideTheRead(t *testing.T) {
	const latency = 60 * time.Millisecond
	cluster.Need(t)
	var proxies []*integration.FaultProxy
	for i := range cluster.Len() {
		p := cluster.Proxy(t, i)
		t.Cleanup(func() { p.Heal() })
		proxies = append(proxies, p)
	}
	// No probe covers the writes (monitor interval 1h): each read needs a
	// position read. tuning_wait_after_write: a write that young would
	// otherwise send its read to the primary.
	dsn := cluster.DSNVia(proxies...) + "&application_name=pgr_beside&pgreplica_driver=pgx" +
		"&tuning_wait_after_write=true&tuning_monitor_interval=1h&tuning_hedge_delay=-1s&pgreplica_wait_budget=5s"
	ctx := testCtx(t, time.Minute)
	db, cn := itest.Open(t, dsn)
	pool, err := itest.NewPgx(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	tbl := newTable(t)
	for _, p := range proxies {
		if err := p.Latency(latency, integration.ToServer); err != nil {
			t.Fatal(err)
		}
	}
	insert, sel := "INSERT INTO "+tbl+" (seq) VALUES ($1)", "SELECT max(seq), inet_server_port() FROM "+tbl
	seq := 0
	for _, door := range []struct {
		name  string
		cn    *pgreplica.Connector
		write func(seq int) error
		read  func() (seq, port int, err error)
	}{
		{"database/sql", cn, func(seq int) error {
			_, err := db.ExecContext(ctx, insert, seq)
			return err
		}, func() (seq, port int, err error) {
			return seq, port, db.QueryRowContext(ctx, sel).Scan(&seq, &port)
		}},
		{"pgreplicapgx", pool.Connector(), func(seq int) error {
			_, err := pool.Exec(ctx, insert, seq)
			return err
		}, func() (seq, port int, err error) {
			return seq, port, pool.QueryRow(ctx, sel).Scan(&seq, &port)
		}},
	} {
		t.Run(door.name, func(t *testing.T) {
			cn := door.cn
			captures, flights := cn.Stats().LSNCaptures, cn.Stats().FlightChecks
			fastest := time.Hour
			for i := range 6 {
				seq++
				if err := door.write(seq); err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				got, port, err := door.read()
				if err != nil {
					t.Fatal(err)
				}
				took := time.Since(start)
				if got != seq {
					t.Fatalf("read %d after writing %d", got, seq)
				}
				if port == cluster.Port(cluster.Primary()) {
					t.Fatalf("read %d ran on the primary; stats %+v", i, cn.Stats())
				}
				fastest = min(fastest, took)
			}
			st := cn.Stats()
			t.Logf("fastest read after a write: %v with %v added to each round trip; %d positions read, %d checks in flight",
				fastest.Round(time.Millisecond), latency, st.LSNCaptures-captures, st.FlightChecks-flights)
			if st.LSNCaptures-captures < 6 || st.FlightChecks-flights < 6 {
				t.Fatalf("%d positions read and %d checks in flight for 6 reads after writes, want 6 of each", st.LSNCaptures-captures, st.FlightChecks-flights)
			}
			// The position first and then the read would take two slow round
			// trips (120 ms); side by side, one and what the servers take.
			if fastest >= latency*3/2 {
				t.Errorf("the fastest read after a write took %v: the position was not read beside the read's flight", fastest)
			}
		})
	}
}
