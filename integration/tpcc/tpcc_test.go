package tpcc

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/pingcap/go-tpc/pkg/workload"
	"github.com/pingcap/go-tpc/tpcc"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration"
)

var cluster *integration.Cluster

func TestMain(m *testing.M) {
	os.Exit(integration.Main(m, integration.Options{Replicas: 2}, &cluster))
}

const threads = 4

// openDB is go-tpc's newDB for PostgreSQL, with pgreplica in front of
// lib/pq: the pool sized as go-tpc sizes it.
func openDB(t *testing.T) *sql.DB {
	t.Helper()
	return openWith(t, pgreplica.DriverName, cluster.DSN()+"&pgreplica_driver=pq&application_name=pgr_tpcc")
}

// openWith opens driver on dsn with go-tpc's pool size, closed with tb.
func openWith(tb testing.TB, driver, dsn string) *sql.DB {
	tb.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	db.SetMaxIdleConns(threads + 1)
	if err := db.Ping(); err != nil {
		tb.Fatal(err)
	}
	return db
}

// execute runs action on every thread as go-tpc's execute does, until
// ctx ends for "run".
func execute(ctx context.Context, w workload.Workloader, action string) error {
	errs := make([]error, threads)
	var wg sync.WaitGroup
	for i := range threads {
		wg.Go(func() {
			tctx := w.InitThread(ctx, i)
			defer w.CleanupThread(tctx, i)
			switch action {
			case "prepare":
				errs[i] = w.Prepare(tctx, i)
			case "check":
				errs[i] = w.Check(tctx, i)
			case "cleanup":
				errs[i] = w.Cleanup(tctx, i)
			case "run":
				for tctx.Err() == nil {
					if err := w.Run(tctx, i); err != nil && tctx.Err() == nil {
						errs[i] = err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// TestTPCCCheck loads one warehouse, runs TPC-C for 10 s with replicas
// applying 200 ms behind the primary, and passes go-tpc's consistency
// check (TPC-C 3.3.2.1-10, 12) through pgreplica: go-tpc's checks read
// with context.Background(), and see what its transactions wrote.
func TestTPCCCheck(t *testing.T) {
	cluster.Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	db := openDB(t)
	cfg := &tpcc.Config{Driver: "postgres", DBName: "postgres", Threads: threads, Parts: 1, Warehouses: 1,
		PartitionType: tpcc.PartitionTypeHash, MaxMeasureLatency: 16 * time.Second, OutputStyle: "plain"}
	w, err := tpcc.NewWorkloader(db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if err := execute(ctx, w, "prepare"); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	t.Logf("prepared one warehouse in %v", time.Since(began).Round(time.Millisecond))
	t.Cleanup(func() { _ = execute(context.Background(), w, "cleanup") })

	for _, i := range replicas() {
		if err := cluster.SetApplyDelay(ctx, i, 200*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cluster.SetApplyDelay(context.Background(), i, 0) })
	}
	rctx, stop := context.WithTimeout(ctx, 10*time.Second)
	err = execute(rctx, w, "run")
	stop()
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	began = time.Now()
	if err := execute(ctx, w, "check"); err != nil {
		t.Fatalf("check: %v", err)
	}
	c, err := pgreplica.ConnectorOf(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	st := c.Stats()
	t.Logf("check passed in %v; reads: %d on replicas, %d on the primary, %d fell back; conflict retries %d",
		time.Since(began).Round(time.Millisecond), st.ReplicaReads, st.PrimaryReads, st.FallbackReads, st.ConflictRetries)
}

// replicas returns the indexes of the cluster's replicas.
func replicas() []int {
	var reps []int
	for i := range cluster.Len() {
		if i != cluster.Primary() {
			reps = append(reps, i)
		}
	}
	return reps
}
