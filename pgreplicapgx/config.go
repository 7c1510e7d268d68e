package pgreplicapgx

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/internal/libpqdsn"
)

// Config is pgxpool.Config for a cluster: pgx's connection configuration
// and pgxpool's hooks and pool settings by their names, and pgreplica's
// own settings in Routing. Make one with ParseConfig, change it, and give
// it to NewWithConfig, as with pgxpool.
//
// pgxpool's settings without a counterpart here: MinConns and
// MinIdleConns (each server's pool dials on demand), HealthCheckPeriod
// (the monitor closes expired and idle connections after every probe:
// every 250ms while statements run, every second while none do),
// MaxConnLifetimeJitter, PingTimeout and ShouldPing (a connection idle
// longer than 1s is pinged before use, within 1s), and the deprecated
// BeforeAcquire (use PrepareConn). ParseConfig refuses their pool_*
// options.
type Config struct {
	// ConnConfig is every connection's pgx configuration (its Tracer,
	// TLSConfig, DialFunc, LookupFunc, RuntimeParams, credentials, ...),
	// parsed from the DSN by ParseConfig, applied to every server of
	// Routing.Hosts: each server's Host and Port are its own (see
	// pgreplica.PgxHooks.ConnConfig). Nil: each server's configuration is
	// parsed from Routing (User, Password, Database, Params).
	ConnConfig *pgx.ConnConfig

	// BeforeConnect is called before a new connection is made, with a
	// copy of the configuration it will use, which it may change (a
	// rotated password, an IAM token). The monitor's connections run it
	// too: they must log in as the application's do.
	BeforeConnect func(context.Context, *pgx.ConnConfig) error

	// AfterConnect is called after a connection is established, before
	// it is used (register types, SET per-connection settings), on every
	// connection the application's statements use, on the primary and on
	// the replicas. The monitor's own connections do not run it.
	AfterConnect func(context.Context, *pgx.Conn) error

	// PrepareConn is called before a connection is lent to a call, as in
	// pgxpool: true lends it; false destroys it; an error fails the call
	// (see pgreplica.PgxHooks.PrepareConn for a read, which may go on to
	// another server).
	PrepareConn func(context.Context, *pgx.Conn) (bool, error)

	// AfterRelease is called after a connection is released, but before
	// it is returned to the pool; false destroys it.
	AfterRelease func(*pgx.Conn) bool

	// BeforeClose is called right before a connection is closed and
	// removed from the pool.
	BeforeClose func(*pgx.Conn)

	// MaxConns bounds the pool of each server (pgxpool's bounds the pool
	// of its one server): Routing.MaxConnsPerHost. 0 means pgreplica's
	// default, 10.
	MaxConns int32

	// MaxConnLifetime closes a connection this old once it is idle:
	// Routing.ConnMaxLifetime. 0 means pgreplica's default, 1h.
	MaxConnLifetime time.Duration

	// MaxConnIdleTime closes a connection idle this long:
	// Routing.ConnMaxIdleTime. 0 means pgreplica's default, 5m.
	MaxConnIdleTime time.Duration

	// Routing holds pgreplica's own settings: the servers (Hosts), the
	// default consistency, the wait budget, the fallback, the lag bound,
	// the replica policy and the zones (see pgreplica.Config). Set the
	// three pool settings above in their pgxpool fields or in Routing,
	// not in both; the hooks only above.
	Routing pgreplica.Config
}

// ParseConfig parses a pgreplica DSN (see pgreplica.ParseDSN: a
// multi-host PostgreSQL URL or key/value string plus pgreplica_*
// options) into a Config, as pgxpool.ParseConfig parses its own: the
// connection settings into ConnConfig (pgx.ParseConfig of the DSN without
// pgreplica's options, every host listed), pgxpool's pool_max_conns,
// pool_max_conn_lifetime and pool_max_conn_idle_time (or pgreplica's
// pgreplica_max_conns_per_host, pgreplica_conn_max_lifetime and
// pgreplica_conn_max_idle_time) into MaxConns, MaxConnLifetime and
// MaxConnIdleTime, and the rest into Routing, whose User, Password,
// Database and Params are left empty (ConnConfig holds them). A pool
// setting the DSN does not give is left 0: pgreplica's default. Like
// pgxpool.ParseConfig it does not connect.
func ParseConfig(dsn string) (*Config, error) {
	rc, err := parseRouting(dsn)
	if err != nil {
		return nil, err
	}
	cc, err := pgx.ParseConfig(connString(rc))
	if err != nil {
		return nil, fmt.Errorf("%w: %s", pgreplica.ErrBadDSN, libpqdsn.Redact(err.Error(), rc.Password))
	}
	rc.User, rc.Password, rc.Database, rc.Params = "", "", "", nil
	cfg := &Config{ConnConfig: cc, Routing: rc}
	cfg.takePoolSettings()
	return cfg, nil
}

// parseRouting parses dsn with pgreplica.ParseDSN, pgxpool's pool_*
// options taken into their pgreplica fields.
func parseRouting(dsn string) (pgreplica.Config, error) {
	rc, err := pgreplica.ParseDSN(dsn)
	if err != nil {
		return rc, err
	}
	for _, k := range slices.Sorted(maps.Keys(rc.Params)) {
		if !strings.HasPrefix(k, "pool_") {
			continue
		}
		v := rc.Params[k]
		delete(rc.Params, k)
		if err := takePoolOption(&rc, k, v); err != nil {
			return rc, err
		}
	}
	if len(rc.Params) == 0 {
		rc.Params = nil
	}
	return rc, nil
}

// takePoolOption sets the pgreplica field of pgxpool's option k.
func takePoolOption(rc *pgreplica.Config, k, v string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", pgreplica.ErrBadDSN, fmt.Sprintf(format, args...))
	}
	switch k {
	case "pool_max_conns":
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 1 {
			return bad("pool_max_conns %q: want an integer > 0", v)
		}
		if rc.MaxConnsPerHost != 0 && rc.MaxConnsPerHost != int(n) {
			return bad("pool_max_conns and pgreplica_max_conns_per_host differ: give one")
		}
		rc.MaxConnsPerHost = int(n)
	case "pool_max_conn_lifetime", "pool_max_conn_idle_time":
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return bad("%s %q: want a positive duration", k, v)
		}
		field, twin := &rc.ConnMaxLifetime, "pgreplica_conn_max_lifetime"
		if k == "pool_max_conn_idle_time" {
			field, twin = &rc.ConnMaxIdleTime, "pgreplica_conn_max_idle_time"
		}
		if *field != 0 && *field != d {
			return bad("%s and %s differ: give one", k, twin)
		}
		*field = d
	default:
		return bad("%s: pgxpool's option has no counterpart in pgreplicapgx (see Config)", k)
	}
	return nil
}

// takePoolSettings moves Routing's pool settings into their pgxpool
// fields.
func (c *Config) takePoolSettings() {
	c.MaxConns, c.Routing.MaxConnsPerHost = int32(c.Routing.MaxConnsPerHost), 0
	c.MaxConnLifetime, c.Routing.ConnMaxLifetime = c.Routing.ConnMaxLifetime, 0
	c.MaxConnIdleTime, c.Routing.ConnMaxIdleTime = c.Routing.ConnMaxIdleTime, 0
}

// connString is rc's connection settings as a key/value DSN for
// pgx.ParseConfig: every host, the credentials and the parameters.
func connString(rc pgreplica.Config) string {
	var b strings.Builder
	addrs := make([]string, len(rc.Hosts))
	ports := make([]string, len(rc.Hosts))
	for i, h := range rc.Hosts {
		addrs[i], ports[i] = h.Addr, strconv.Itoa(int(cmp.Or(h.Port, libpqdsn.DefaultPort)))
	}
	libpqdsn.WriteParam(&b, "host", strings.Join(addrs, ","), true)
	libpqdsn.WriteParam(&b, "port", strings.Join(ports, ","), true)
	for _, f := range [...]struct{ k, v string }{{"user", rc.User}, {"password", rc.Password}, {"dbname", rc.Database}} {
		if f.v != "" {
			libpqdsn.WriteParam(&b, f.k, f.v, true)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(rc.Params)) {
		libpqdsn.WriteParam(&b, k, rc.Params[k], true)
	}
	return b.String()
}

// routing returns the pgreplica.Config of c: Routing with the pool
// settings and the hooks of c.
func (c *Config) routing() (pgreplica.Config, error) {
	rc := c.Routing
	if c.MaxConns < 0 {
		return rc, fmt.Errorf("%w: MaxConns is %d; want > 0, or 0 for the default", pgreplica.ErrBadConfig, c.MaxConns)
	}
	if err := both("MaxConns", int64(c.MaxConns), "MaxConnsPerHost", int64(rc.MaxConnsPerHost)); err != nil {
		return rc, err
	}
	if err := both("MaxConnLifetime", int64(c.MaxConnLifetime), "ConnMaxLifetime", int64(rc.ConnMaxLifetime)); err != nil {
		return rc, err
	}
	if err := both("MaxConnIdleTime", int64(c.MaxConnIdleTime), "ConnMaxIdleTime", int64(rc.ConnMaxIdleTime)); err != nil {
		return rc, err
	}
	rc.MaxConnsPerHost = cmp.Or(rc.MaxConnsPerHost, int(c.MaxConns))
	rc.ConnMaxLifetime = cmp.Or(rc.ConnMaxLifetime, c.MaxConnLifetime)
	rc.ConnMaxIdleTime = cmp.Or(rc.ConnMaxIdleTime, c.MaxConnIdleTime)
	if c.ConnConfig == nil && c.BeforeConnect == nil && c.AfterConnect == nil && c.PrepareConn == nil &&
		c.AfterRelease == nil && c.BeforeClose == nil {
		return rc, nil
	}
	if rc.Pgx != nil {
		return rc, fmt.Errorf("%w: Routing.Pgx is set: give the hooks in Config's own fields", pgreplica.ErrBadConfig)
	}
	rc.Pgx = &pgreplica.PgxHooks{ConnConfig: c.ConnConfig, BeforeConnect: c.BeforeConnect, AfterConnect: c.AfterConnect,
		PrepareConn: c.PrepareConn, AfterRelease: c.AfterRelease, BeforeClose: c.BeforeClose}
	return rc, nil
}

// both refuses a setting given in its pgxpool field and, differently, in
// Routing.
func both(mine string, v int64, theirs string, w int64) error {
	if v != 0 && w != 0 && v != w {
		return fmt.Errorf("%w: %s and Routing.%s differ: set one", pgreplica.ErrBadConfig, mine, theirs)
	}
	return nil
}
