package checker

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	_ "github.com/jackc/pgx/v5/stdlib" // the naive router's driver, "pgx"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/pgreplicapgx"
)

// Target is a way of routing the workload's statements to the cluster.
type Target string

// Targets.
const (
	// TargetSession: pgreplica, one *sql.DB, every operation of a workload
	// session carries that session's pgreplica.Session (WithSession).
	TargetSession Target = "pgreplica-session"
	// TargetProcess: as TargetSession, except that reads of the session's
	// own rows carry no requirement at all, as with context.Background():
	// they rely on the driver's default "process" consistency.
	TargetProcess Target = "pgreplica-process"
	// TargetPgx: as TargetSession, through the pgx-native handle
	// (pgreplicapgx) instead of database/sql.
	TargetPgx Target = "pgreplicapgx-session"
	// TargetNaive: a plain pgx *sql.DB to the primary for writes and one
	// per replica for reads, taken in turn; no positions, no waiting. In
	// a Deployment it goes through the same proxies: the primary's address
	// for writes, and the reader endpoint or each replica's PgBouncer for
	// reads.
	TargetNaive Target = "naive"
)

// Targets lists every target, pgreplica first.
func Targets() []Target { return []Target{TargetSession, TargetProcess, TargetPgx, TargetNaive} }

// ParseTarget accepts a Target's name.
func ParseTarget(s string) (Target, error) {
	for _, t := range Targets() {
		if string(t) == s {
			return t, nil
		}
	}
	return "", fmt.Errorf("checker: unknown target %q (want %s, %s, %s or %s)", s, TargetSession, TargetProcess, TargetPgx, TargetNaive)
}

// Pgreplica reports whether the target runs through the pgreplica driver.
func (t Target) Pgreplica() bool { return t == TargetSession || t == TargetProcess || t == TargetPgx }

// router holds the pools of one run.
type router struct {
	target Target
	writer *sql.DB
	// readers are the pools reads take in turn: the replicas for the
	// naive router, the one pgreplica pool otherwise.
	readers []*sql.DB
	rr      atomic.Uint64
	all     []*sql.DB
	// pgx is the handle of TargetPgx, which has no *sql.DB.
	pgx *pgreplicapgx.Pool
}

// openRouter opens the pools of target t and checks they answer.
func openRouter(ctx context.Context, cl Cluster, o *Options) (_ *router, err error) {
	r := &router{target: o.Target}
	defer func() {
		if err != nil {
			err = errors.Join(err, r.close())
		}
	}()
	open := func(driverName, dsn string) (*sql.DB, error) {
		db, err := sql.Open(driverName, dsn)
		if err != nil {
			return nil, fmt.Errorf("checker: opening %s: %w", driverName, err)
		}
		r.all = append(r.all, db)
		// Keep a pooled connection per session: reconnecting would
		// dominate the naive router's timing.
		db.SetMaxIdleConns(o.Sessions + 1)
		if err := ping(ctx, db, driverName, dsn, o.Logf); err != nil {
			return nil, fmt.Errorf("checker: connecting with %s: %w", driverName, err)
		}
		return db, nil
	}
	if t := o.Target; t.Pgreplica() {
		// Every session may fall back to the primary at once during a
		// pause (the fallback slots are half the pool): the checker tests
		// consistency, not the fallback bound (which would refuse reads
		// with ErrFallbackLimit, by design).
		dsn := withParams(cl.DSN(), append([]string{"application_name", "pgreplica_checker", "pgreplica_driver", o.Driver,
			"pgreplica_max_conns_per_host", strconv.Itoa(2 * o.Sessions)},
			append(driverParams(cl, o.Driver), syncParams(o)...)...)...)
		if t == TargetPgx {
			if o.Names {
				return r, errors.New("checker: Names is for the database/sql targets")
			}
			r.pgx, err = openPgx(ctx, dsn)
			return r, err
		}
		var db *sql.DB
		if o.Names {
			db, err = openNamed(ctx, dsn, o)
			if db != nil {
				r.all = append(r.all, db)
			}
		} else {
			db, err = open(pgreplica.DriverName, dsn)
		}
		if err != nil {
			return r, err
		}
		r.writer, r.readers = db, []*sql.DB{db}
		return r, nil
	}
	// In a Deployment, through the same proxies as pgreplica.
	writer, readers := naiveDSNs(cl)
	params := append(append([]string{"application_name", "naive_checker"}, driverParams(cl, "pgx")...), syncParams(o)...)
	if r.writer, err = open("pgx", withParams(writer, params...)); err != nil {
		return r, err
	}
	for _, dsn := range readers {
		db, err := open("pgx", withParams(dsn, params...))
		if err != nil {
			return r, err
		}
		r.readers = append(r.readers, db)
	}
	if len(r.readers) == 0 {
		return r, errors.New("checker: the naive router needs at least one replica")
	}
	return r, nil
}

// openNamed opens a pgreplica handle on dsn's servers reached through one
// name (Options.Names).
func openNamed(ctx context.Context, dsn string, o *Options) (*sql.DB, error) {
	cfg, err := pgreplica.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("checker: %w", err)
	}
	var addrs []string
	for _, h := range cfg.Hosts {
		addrs = append(addrs, fmt.Sprintf("%s:%d", h.Addr, h.Port))
	}
	cfg.Hosts = []pgreplica.Host{{Addr: "pods.checker.svc"}}
	cfg.LookupFunc = func(context.Context, string) ([]string, error) { return addrs, nil }
	c, err := pgreplica.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("checker: %w", err)
	}
	db := sql.OpenDB(c)
	db.SetMaxIdleConns(o.Sessions + 1)
	if err := ping(ctx, db, pgreplica.DriverName, "pods.checker.svc", o.Logf); err != nil {
		return db, fmt.Errorf("checker: connecting through one name: %w", err)
	}
	return db, nil
}

// withParams adds query parameters (name, value pairs) to a URL DSN. It
// appends rather than parsing, because net/url rejects the multi-host form
// postgres://h1:p1,h2:p2/db.
func withParams(dsn string, kv ...string) string {
	var b strings.Builder
	b.WriteString(dsn)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	for i := 0; i+1 < len(kv); i += 2 {
		b.WriteString(sep + url.QueryEscape(kv[i]) + "=" + url.QueryEscape(kv[i+1]))
		sep = "&"
	}
	return b.String()
}

// reader returns the pool the next read uses.
func (r *router) reader() *sql.DB {
	if len(r.readers) == 1 {
		return r.readers[0]
	}
	return r.readers[r.rr.Add(1)%uint64(len(r.readers))]
}

// withRequirement attaches what the target asks of an operation on a row
// that is (own) or is not the session's.
func (r *router) withRequirement(ctx context.Context, s *pgreplica.Session, own bool) context.Context {
	switch {
	case r.target == TargetSession, r.target == TargetPgx, r.target == TargetProcess && !own:
		return pgreplica.WithSession(ctx, s)
	}
	return ctx
}

// stats returns the pgreplica connector's counters, or nil for the naive
// router.
func (r *router) stats(ctx context.Context) (*pgreplica.Stats, error) {
	if !r.target.Pgreplica() {
		return nil, nil
	}
	if r.pgx != nil {
		s := r.pgx.Stat()
		return &s, nil
	}
	c, err := pgreplica.ConnectorOf(ctx, r.writer)
	if err != nil {
		return nil, fmt.Errorf("checker: %w", err)
	}
	s := c.Stats()
	return &s, nil
}

func (r *router) close() error {
	var errs []error
	for _, db := range r.all {
		errs = append(errs, db.Close())
	}
	if r.pgx != nil {
		r.pgx.Close()
	}
	return errors.Join(errs...)
}

// pingPatience bounds how long a new pool's first ping is retried while
// it fails with a lost connection: a PgBouncer whose server was just
// killed and restarted may refuse a few logins (server_login_retry).
const pingPatience = 5 * time.Second

// ping checks that db answers, retrying while it fails with a lost
// connection for up to pingPatience. database/sql reports a failed ping
// of the pgx driver as driver.ErrBadConn alone, so a failure of the naive
// router's pool is described by one connection of its own.
func ping(ctx context.Context, db *sql.DB, driverName, dsn string, logf func(string, ...any)) error {
	began := time.Now()
	for attempt := 1; ; attempt++ {
		err := db.PingContext(ctx)
		if err == nil {
			if attempt > 1 {
				logf("checker: %s answered after %d pings in %v", driverName, attempt, time.Since(began).Round(time.Millisecond))
			}
			return nil
		}
		if !connectionLost(err) || time.Since(began) > pingPatience || ctx.Err() != nil {
			if driverName == "pgx" {
				if c, cerr := pgx.Connect(ctx, dsn); cerr != nil {
					err = fmt.Errorf("%w (a connection of its own: %w)", err, cerr)
				} else {
					err = fmt.Errorf("%w (a connection of its own: ping: %v)", err, c.Ping(ctx))
					c.Close(context.Background())
				}
			}
			return err
		}
		t := time.NewTimer(10 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
}
