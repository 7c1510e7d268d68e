package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration"
)

// router is how a scenario reaches the database: the demo plays every
// scenario once through each implementation.
type router interface {
	// user returns the context of one simulated user's requests (their
	// browser session).
	user(ctx context.Context) context.Context
	// exec runs a write.
	exec(ctx context.Context, query string, args ...any) error
	// queryRow runs a read.
	queryRow(ctx context.Context, query string, args ...any) *sql.Row
	// token is what a producer puts in a job message, beside the job, so
	// that the consumer can read what the producer wrote.
	token(ctx context.Context) string
	// workerRow runs a consumer's read, in another process (its own
	// *sql.DB), given the message's token.
	workerRow(ctx context.Context, token, query string, args ...any) (*sql.Row, error)
	// warm opens the connections users simultaneous requests need, as a
	// running application has them, so that connection set-up does not
	// count as replication lag.
	warm(ctx context.Context, users int) error
	// reads counts the reads run so far.
	reads() int64
	close() error
}

// naiveRouter is what an application without pgreplica typically does:
// writes go to the primary, reads round-robin over the replicas, with
// plain pgx pools.
type naiveRouter struct {
	primary  *sql.DB
	replicas []*sql.DB
	// workers are the consumer process's own pools to the replicas.
	workers []*sql.DB
	rr      atomic.Uint64
	nreads  atomic.Int64
}

func newNaiveRouter(cl *integration.Cluster) (*naiveRouter, error) {
	r := &naiveRouter{}
	open := func(i int) (*sql.DB, error) {
		db, err := sql.Open("pgx", cl.NodeDSN(i)+"&application_name=demo-naive")
		if err != nil {
			r.close()
			return nil, fmt.Errorf("naive router: %w", err)
		}
		return db, nil
	}
	var err error
	if r.primary, err = open(cl.Primary()); err != nil {
		return nil, err
	}
	for i := range cl.Len() {
		if i == cl.Primary() {
			continue
		}
		db, err := open(i)
		if err != nil {
			return nil, err
		}
		r.replicas = append(r.replicas, db)
		if db, err = open(i); err != nil {
			return nil, err
		}
		r.workers = append(r.workers, db)
	}
	return r, nil
}

func (r *naiveRouter) pools() []*sql.DB {
	return append(append([]*sql.DB{r.primary}, r.replicas...), r.workers...)
}

func (r *naiveRouter) warm(ctx context.Context, users int) error {
	var warmers []func(context.Context) error
	for _, db := range r.pools() {
		db.SetMaxIdleConns(users) // keep them: the default keeps 2
		warmers = append(warmers, func(ctx context.Context) error {
			_, err := db.ExecContext(ctx, warmSQL)
			return err
		})
	}
	return warmPools(ctx, users, warmers...)
}

func (r *naiveRouter) user(ctx context.Context) context.Context { return ctx }

func (r *naiveRouter) exec(ctx context.Context, query string, args ...any) error {
	_, err := r.primary.ExecContext(ctx, query, args...)
	return err
}

func (r *naiveRouter) queryRow(ctx context.Context, query string, args ...any) *sql.Row {
	r.nreads.Add(1)
	return r.replicas[r.rr.Add(1)%uint64(len(r.replicas))].QueryRowContext(ctx, query, args...)
}

// token: the naive application has nothing to pass.
func (r *naiveRouter) token(context.Context) string { return "" }

func (r *naiveRouter) workerRow(ctx context.Context, _, query string, args ...any) (*sql.Row, error) {
	r.nreads.Add(1)
	return r.workers[r.rr.Add(1)%uint64(len(r.workers))].QueryRowContext(ctx, query, args...), nil
}

func (r *naiveRouter) reads() int64 { return r.nreads.Load() }

func (r *naiveRouter) close() error {
	var errs []error
	for _, db := range r.pools() {
		if db != nil {
			errs = append(errs, db.Close())
		}
	}
	return errors.Join(errs...)
}

// pgreplicaRouter uses the driver as an application would: one *sql.DB
// for everything, a Session per user, and the session's token in the job
// message, read by a worker with a *sql.DB of its own.
type pgreplicaRouter struct {
	db, worker *sql.DB
	nreads     atomic.Int64
}

func newPgreplicaRouter(ctx context.Context, dsn string) (*pgreplicaRouter, error) {
	r := &pgreplicaRouter{}
	var err error
	for _, db := range []**sql.DB{&r.db, &r.worker} {
		if *db, err = sql.Open("pgreplica", dsn+"&application_name=demo-pgreplica"); err != nil {
			r.close()
			return nil, fmt.Errorf("pgreplica router: %w", err)
		}
		if err = (*db).PingContext(ctx); err != nil {
			r.close()
			return nil, fmt.Errorf("pgreplica router: %w", err)
		}
	}
	return r, nil
}

func (r *pgreplicaRouter) user(ctx context.Context) context.Context {
	return pgreplica.WithSession(ctx, pgreplica.NewSession())
}

func (r *pgreplicaRouter) exec(ctx context.Context, query string, args ...any) error {
	_, err := r.db.ExecContext(ctx, query, args...)
	return err
}

func (r *pgreplicaRouter) queryRow(ctx context.Context, query string, args ...any) *sql.Row {
	r.nreads.Add(1)
	return r.db.QueryRowContext(ctx, query, args...)
}

func (r *pgreplicaRouter) token(ctx context.Context) string {
	return pgreplica.SessionFrom(ctx).Token()
}

func (r *pgreplicaRouter) workerRow(ctx context.Context, token, query string, args ...any) (*sql.Row, error) {
	t, err := pgreplica.ParseToken(token)
	if err != nil {
		return nil, err
	}
	r.nreads.Add(1)
	return r.worker.QueryRowContext(pgreplica.WithToken(ctx, t), query, args...), nil
}

// warm runs enough simultaneous eventual reads to open users connections
// to each replica (round-robin spreads them over two), and primary reads
// for the primary, on both connectors.
func (r *pgreplicaRouter) warm(ctx context.Context, users int) error {
	var warmers []func(context.Context) error
	for _, db := range []*sql.DB{r.db, r.worker} {
		read := func(ctx context.Context) error {
			var s string
			return db.QueryRowContext(ctx, warmSQL).Scan(&s)
		}
		eventual := func(ctx context.Context) error { return read(pgreplica.WithEventual(ctx)) }
		primary := func(ctx context.Context) error { return read(pgreplica.WithPrimary(ctx)) }
		warmers = append(warmers, eventual, eventual, primary)
	}
	return warmPools(ctx, users, warmers...)
}

func (r *pgreplicaRouter) reads() int64 { return r.nreads.Load() }

// stats merges the counters of the application's and the worker's
// connectors.
func (r *pgreplicaRouter) stats(ctx context.Context) (pgreplica.Stats, error) {
	var all []pgreplica.Stats
	for _, db := range []*sql.DB{r.db, r.worker} {
		c, err := pgreplica.ConnectorOf(ctx, db)
		if err != nil {
			return pgreplica.Stats{}, err
		}
		all = append(all, c.Stats())
	}
	return mergeStats(all...), nil
}

func (r *pgreplicaRouter) close() error {
	var errs []error
	for _, db := range []*sql.DB{r.db, r.worker} {
		if db != nil {
			errs = append(errs, db.Close())
		}
	}
	return errors.Join(errs...)
}

// warmSQL holds a connection long enough for the simultaneous ones to
// need connections of their own.
const warmSQL = `SELECT pg_sleep(0.05)::text`

// warmPools runs n simultaneous calls of each warmer, all at once.
func warmPools(ctx context.Context, n int, warmers ...func(context.Context) error) error {
	errs := make([]error, n*len(warmers))
	var wg sync.WaitGroup
	for k, q := range warmers {
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[k*n+i] = q(ctx)
			}()
		}
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil { // the first says it; the others repeat it
			return fmt.Errorf("opening the connection pools: %w", err)
		}
	}
	return nil
}

// mergeStats adds up the read counters, fallbacks and wait histograms of
// several connectors; the wait quantiles are recomputed from the merged
// buckets.
func mergeStats(all ...pgreplica.Stats) pgreplica.Stats {
	m := pgreplica.Stats{Fallbacks: map[string]int64{}, FailedReads: map[string]int64{}}
	for _, s := range all {
		addStats(&m, s, 1)
	}
	return withQuantiles(m)
}

// statsSince returns the counters of after minus those of before: what
// happened between two snapshots of the same connectors.
func statsSince(after, before pgreplica.Stats) pgreplica.Stats {
	m := pgreplica.Stats{Fallbacks: map[string]int64{}, FailedReads: map[string]int64{}}
	addStats(&m, after, 1)
	addStats(&m, before, -1)
	return withQuantiles(m)
}

// addStats adds sign times the counters of s to m.
func addStats(m *pgreplica.Stats, s pgreplica.Stats, sign int64) {
	m.ReplicaReads += sign * s.ReplicaReads
	m.PrimaryReads += sign * s.PrimaryReads
	m.FallbackReads += sign * s.FallbackReads
	m.TokenedReads += sign * s.TokenedReads
	m.TokenedFallbacks += sign * s.TokenedFallbacks
	m.ConflictRetries += sign * s.ConflictRetries
	for k, v := range s.Fallbacks {
		m.Fallbacks[k] += sign * v
	}
	for k, v := range s.FailedReads {
		m.FailedReads[k] += sign * v
	}
	m.Wait.Count += sign * s.Wait.Count
	m.Wait.Sum += time.Duration(sign) * s.Wait.Sum
	if sign > 0 {
		m.Wait.Max = max(m.Wait.Max, s.Wait.Max) // an upper bound for a difference
	}
	for i, b := range s.Wait.Buckets {
		if i == len(m.Wait.Buckets) {
			m.Wait.Buckets = append(m.Wait.Buckets, pgreplica.Bucket{UpperBound: b.UpperBound})
		}
		m.Wait.Buckets[i].Count += sign * b.Count
	}
}

// withQuantiles fills the ratios and wait quantiles of summed counters.
func withQuantiles(m pgreplica.Stats) pgreplica.Stats {
	if m.TokenedReads > 0 {
		m.TokenedFallbackRatio = float64(m.TokenedFallbacks) / float64(m.TokenedReads)
	}
	m.Wait.P50, m.Wait.P95, m.Wait.P99 = m.Wait.Quantile(0.50), m.Wait.Quantile(0.95), m.Wait.Quantile(0.99)
	return m
}
