package pgreplica

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/pgreplica/pgreplica/internal/dsnopt"
	"github.com/pgreplica/pgreplica/internal/libpqdsn"
	"github.com/pgreplica/pgreplica/internal/tuning"
)

// maxHosts is how many hosts a Config may list (nodes are kept in a
// nodeSet, a bit each).
const maxHosts = 64

// Configuration: Config and the types of its fields (Host, InnerDriver,
// the enumerations, with the names the DSN gives their values and their
// text forms), its defaults and the values it may not take, and the
// settings every statement reads, copied from it. dsn.go reads it from a
// DSN.

// Host is one PostgreSQL server of the cluster. Its role (primary or
// replica) is discovered, never configured.
type Host struct {
	// Addr is a host name, an IP address or a Unix socket directory. A
	// name is resolved as pgx resolves it; when it has several addresses
	// (localhost's 127.0.0.1 and ::1, a dual-stack or DNS round-robin
	// name, a headless Service), each is a server of its own, and
	// addresses that reach the same server count once.
	Addr string
	// Port defaults to 5432.
	Port uint16
	// Zone is an optional locality label (e.g. an availability zone) used to
	// prefer replicas near the client.
	Zone string
}

// InnerDriver names the driver that talks to each PostgreSQL server.
type InnerDriver string

// Supported inner drivers.
const (
	DriverPgx InnerDriver = "pgx" // github.com/jackc/pgx/v5/stdlib (default)
	DriverPq  InnerDriver = "pq"  // github.com/lib/pq
)

// Config holds every pgreplica setting. A zero value plus Hosts is usable:
// zero fields take the documented defaults. ParseDSN builds one from a DSN.
type Config struct {
	// Hosts lists every server of the cluster in any order.
	Hosts []Host
	// User, Password and Database are passed to every server.
	User     string
	Password string
	Database string
	// Params are libpq parameters passed unchanged to the inner driver
	// (sslmode, application_name, connect_timeout, ...).
	Params map[string]string

	// Driver selects the inner driver; default DriverPgx.
	Driver InnerDriver
	// LookupFunc resolves the hosts' names, as pgx's ConnConfig.LookupFunc
	// (for either inner driver); default the system resolver. A name with
	// several addresses gives a server per address (see Host).
	LookupFunc LookupFunc
	// Pgx, when set, gives every connection pgx's hooks (see PgxHooks:
	// ConnConfig, BeforeConnect, AfterConnect, PrepareConn, AfterRelease,
	// BeforeClose). Only with DriverPgx.
	Pgx *PgxHooks

	// MaxConnsPerHost bounds each host's physical pool; default 10.
	MaxConnsPerHost int
	// ConnMaxIdleTime closes physical connections idle this long; default 5m.
	ConnMaxIdleTime time.Duration
	// ConnMaxLifetime closes physical connections this old once they are
	// idle; default 1h.
	ConnMaxLifetime time.Duration
	// ConnectTimeout bounds each physical connection attempt (and a probe
	// that has to connect first) when the caller's context has no earlier
	// deadline; default 5s.
	ConnectTimeout time.Duration

	// Consistency applies to reads whose context carries no requirement;
	// default ConsistencyProcess.
	Consistency Consistency
	// WaitBudget bounds how long a read waits for a replica to reach its
	// required position before the fallback applies; default 150ms. It never
	// extends past the context's deadline.
	WaitBudget time.Duration
	// Fallback says what a read does when no replica qualifies in time;
	// default FallbackPrimary.
	Fallback Fallback
	// MaxLag excludes replicas further behind in time from reads without
	// a position requirement; zero means no bound.
	MaxLag time.Duration

	// Policy picks among eligible replicas; default PolicyRoundRobin.
	Policy Policy
	// Picker, when set, replaces Policy with a picker of your own.
	Picker Picker
	// Zone is the client's own zone; replicas with the same Host.Zone are
	// preferred.
	Zone string

	// Logger receives role changes, bans and re-admissions (Info/Warn) and
	// per-statement routing (Debug). Nil discards. Passwords are never logged.
	Logger *slog.Logger

	// knobs are the internal timings tests shorten (internal/tuning).
	knobs tuning.Knobs
}

// Defaults applied by withDefaults.
const (
	defaultPort            = libpqdsn.DefaultPort
	defaultMaxConnsPerHost = 10
	defaultConnMaxIdleTime = 5 * time.Minute
	defaultConnMaxLifetime = time.Hour
	defaultConnectTimeout  = 5 * time.Second
	defaultWaitBudget      = 150 * time.Millisecond
)

// The internal timings' defaults (tuning.Knobs). Each is what the tests and
// benchmarks named in docs/operations.md found right for every deployment
// shape; none is a user's choice.
const (
	defaultHealthCheckAfter = time.Second
	defaultMonitorInterval  = 250 * time.Millisecond
	idleMonitorFactor       = 4
	defaultProbeTimeout     = time.Second
	defaultHedgeDelay       = 50 * time.Millisecond
	defaultMaxHedgePercent  = 5
)

// Consistency is the guarantee a read gets when its context carries no
// requirement of its own.
type Consistency int

// Default consistency levels.
const (
	// ConsistencyProcess: reads see every write this connector completed
	// before the read started (read-your-writes for the whole process).
	ConsistencyProcess Consistency = iota
	// ConsistencyEventual: reads go to any healthy replica.
	ConsistencyEventual
	// ConsistencyPrimary: reads go to the primary.
	ConsistencyPrimary
)

// Fallback says what a read does when no replica satisfies it in time.
type Fallback int

// Fallback policies.
const (
	// FallbackPrimary reads from the primary. At most half the primary's
	// pool (MaxConnsPerHost) serves reads that fell back at once, so
	// writes keep the other half; more wait, in order of arrival, within
	// their context's deadline.
	FallbackPrimary Fallback = iota
	// FallbackError returns an error wrapping ErrNoFreshReplica and never
	// loads the primary ("replica only").
	FallbackError
)

// The names the DSN gives the enumerations' values.
var (
	driverNames      = []dsnopt.Name[InnerDriver]{{Name: "pgx", V: DriverPgx}, {Name: "pq", V: DriverPq}}
	consistencyNames = []dsnopt.Name[Consistency]{{Name: "process", V: ConsistencyProcess}, {Name: "eventual", V: ConsistencyEventual}, {Name: "primary", V: ConsistencyPrimary}}
	fallbackNames    = []dsnopt.Name[Fallback]{{Name: "primary", V: FallbackPrimary}, {Name: "error", V: FallbackError}}
	policyNames      = []dsnopt.Name[Policy]{{Name: "round_robin", V: PolicyRoundRobin}, {Name: "random", V: PolicyRandom}, {Name: "least_lag", V: PolicyLeastLag}, {Name: "latency", V: PolicyLatency}}
)

// The enumerations of Config print as the names the DSN takes and parse
// back from them (encoding.TextMarshaler and TextUnmarshaler, so they work
// with flag.TextVar, JSON and YAML configuration as well).

func (c Consistency) String() string { return enumString(consistencyNames, c) }

// MarshalText returns the DSN's name for c.
func (c Consistency) MarshalText() ([]byte, error) { return enumText(consistencyNames, c) }

// UnmarshalText parses a name the DSN option pgreplica_consistency takes.
func (c *Consistency) UnmarshalText(b []byte) error {
	return enumParse(c, consistencyNames, "consistency", b)
}

func (f Fallback) String() string { return enumString(fallbackNames, f) }

// MarshalText returns the DSN's name for f.
func (f Fallback) MarshalText() ([]byte, error) { return enumText(fallbackNames, f) }

// UnmarshalText parses a name the DSN option pgreplica_fallback takes.
func (f *Fallback) UnmarshalText(b []byte) error {
	return enumParse(f, fallbackNames, "fallback", b)
}

func (p Policy) String() string { return enumString(policyNames, p) }

// MarshalText returns the DSN's name for p.
func (p Policy) MarshalText() ([]byte, error) { return enumText(policyNames, p) }

// UnmarshalText parses a name the DSN option pgreplica_policy takes.
func (p *Policy) UnmarshalText(b []byte) error { return enumParse(p, policyNames, "policy", b) }

func enumString[T ~int](names []dsnopt.Name[T], v T) string {
	if s, ok := dsnopt.NameOf(names, v); ok {
		return s
	}
	return fmt.Sprintf("%T(%d)", v, v) // %d: %v would call String again
}

func enumText[T ~int](names []dsnopt.Name[T], v T) ([]byte, error) {
	if s, ok := dsnopt.NameOf(names, v); ok {
		return []byte(s), nil
	}
	return nil, fmt.Errorf("%w: no name for %T(%d)", ErrBadConfig, v, v)
}

func enumParse[T ~int](p *T, names []dsnopt.Name[T], what string, b []byte) error {
	if err := dsnopt.Enum(p, names).Set(string(b)); err != nil {
		return fmt.Errorf("%w: %s %q: %w", ErrBadConfig, what, b, err)
	}
	return nil
}

// settings are the values of Config that every statement reads, copied
// together into one cache line when the connector is made (Config spreads
// them over five): what decide reads, and the hedge delay.
type settings struct {
	waitBudget, maxLag, hedgeDelay time.Duration
	zone                           string
	consistency                    Consistency
	fallback                       Fallback
}

func settingsOf(cfg *Config) settings {
	return settings{
		waitBudget: cfg.WaitBudget, maxLag: cfg.MaxLag, hedgeDelay: cfg.knobs.HedgeDelay,
		zone: cfg.Zone, consistency: cfg.Consistency, fallback: cfg.Fallback,
	}
}

// fallbackSlots is how many reads that fell back may use the primary at
// once: half its pool, so writes keep the other half.
func (c *Config) fallbackSlots() int { return max(1, c.MaxConnsPerHost/2) }

// ---- Checking a Config: its documented defaults (withDefaults) and the
// values it may not take (validate) ----

// withDefaults returns a copy of c with every zero field set to its
// documented default. Hosts, Params and Pgx are copied, so later changes
// to the caller's Config do not reach the copy. Negative values are kept for
// validate to report (a negative knobs.HedgeDelay or HealthCheckAfter
// disables hedging or the check).
func (c Config) withDefaults() Config {
	c.Hosts = slices.Clone(c.Hosts)
	for i := range c.Hosts {
		c.Hosts[i].Port = cmp.Or(c.Hosts[i].Port, defaultPort)
	}
	c.Params = maps.Clone(c.Params)
	c.Pgx = c.Pgx.clone()
	if c.LookupFunc == nil && c.Pgx != nil && c.Pgx.ConnConfig != nil && c.Pgx.ConnConfig.LookupFunc != nil {
		c.LookupFunc = LookupFunc(c.Pgx.ConnConfig.LookupFunc) // the hosts' names, resolved as pgx would
	}
	c.Driver = cmp.Or(c.Driver, DriverPgx)
	c.MaxConnsPerHost = cmp.Or(c.MaxConnsPerHost, defaultMaxConnsPerHost)
	c.ConnMaxIdleTime = cmp.Or(c.ConnMaxIdleTime, defaultConnMaxIdleTime)
	c.ConnMaxLifetime = cmp.Or(c.ConnMaxLifetime, defaultConnMaxLifetime)
	c.ConnectTimeout = cmp.Or(c.ConnectTimeout, defaultConnectTimeout)
	c.WaitBudget = cmp.Or(c.WaitBudget, defaultWaitBudget)
	k := &c.knobs
	k.HealthCheckAfter = cmp.Or(k.HealthCheckAfter, defaultHealthCheckAfter)
	k.MonitorInterval = cmp.Or(k.MonitorInterval, defaultMonitorInterval)
	k.IdleMonitorInterval = max(cmp.Or(k.IdleMonitorInterval, idleMonitorFactor*k.MonitorInterval), k.MonitorInterval)
	k.ProbeTimeout = cmp.Or(k.ProbeTimeout, defaultProbeTimeout)
	k.HedgeDelay = cmp.Or(k.HedgeDelay, defaultHedgeDelay)
	k.MaxHedgePercent = min(max(cmp.Or(k.MaxHedgePercent, defaultMaxHedgePercent), 1), 100)
	// Consistency (ConsistencyProcess), Fallback (FallbackPrimary) and
	// Policy (PolicyRoundRobin) default to their zero values.
	return c
}

func init() {
	// Tests reach the internal timings through tuning.Set; nothing else
	// sets it.
	tuning.Set = func(cfg any, k tuning.Knobs) { cfg.(*Config).knobs = k }
}

func errBadConfigf(format string, args ...any) error {
	return newDSNError(ErrBadConfig, format, args...)
}

// validate reports the first setting of c that is out of range. It accepts
// c before or after withDefaults: zero values mean "default". Errors wrap
// ErrBadConfig, or ErrUnknownOption for an unknown Driver, and never contain
// the password.
func (c Config) validate() error {
	if len(c.Hosts) == 0 {
		return errBadConfigf("no hosts: Config.Hosts is empty")
	}
	seen := make(map[Host]int, len(c.Hosts))
	for i, h := range c.Hosts {
		switch {
		case h.Addr == "":
			return errBadConfigf("Hosts[%d].Addr is empty", i)
		case strings.ContainsAny(h.Addr, ",\x00"):
			return errBadConfigf("Hosts[%d].Addr %q contains a comma or a NUL byte", i, h.Addr)
		}
		key := Host{Addr: h.Addr, Port: h.Port}
		if key.Port == 0 {
			key.Port = defaultPort
		}
		if j, dup := seen[key]; dup {
			return errBadConfigf("Hosts[%d] and Hosts[%d] are the same server (%s port %d)", j, i, key.Addr, key.Port)
		}
		seen[key] = i
	}
	switch c.Driver {
	case "", DriverPgx, DriverPq:
	default:
		return newDSNError(ErrUnknownOption, "inner driver %q; valid drivers: %s", string(c.Driver), dsnopt.List(driverNames))
	}
	if err := c.Pgx.validate(&c); err != nil {
		return err
	}
	if c.MaxConnsPerHost < 0 {
		return errBadConfigf("MaxConnsPerHost is %d; want > 0, or 0 for the default %d", c.MaxConnsPerHost, defaultMaxConnsPerHost)
	}
	for _, d := range [...]struct {
		name string
		v    time.Duration
	}{
		{"ConnMaxIdleTime", c.ConnMaxIdleTime},
		{"ConnMaxLifetime", c.ConnMaxLifetime},
		{"ConnectTimeout", c.ConnectTimeout},
		{"WaitBudget", c.WaitBudget},
		{"MaxLag", c.MaxLag},
	} {
		if d.v < 0 {
			return errBadConfigf("%s is %v; want >= 0 (0 selects the default)", d.name, d.v)
		}
	}
	if !dsnopt.Named(consistencyNames, c.Consistency) {
		return errBadConfigf("Consistency is %d; want ConsistencyProcess, ConsistencyEventual or ConsistencyPrimary", int(c.Consistency))
	}
	if !dsnopt.Named(fallbackNames, c.Fallback) {
		return errBadConfigf("Fallback is %d; want FallbackPrimary or FallbackError", int(c.Fallback))
	}
	if len(c.Hosts) > maxHosts {
		return errBadConfigf("%d hosts; at most %d are supported", len(c.Hosts), maxHosts)
	}
	if !dsnopt.Named(policyNames, c.Policy) {
		return errBadConfigf("Policy is %d; want PolicyRoundRobin, PolicyRandom, PolicyLeastLag or PolicyLatency", int(c.Policy))
	}
	if strings.IndexByte(c.User, 0) >= 0 {
		return errBadConfigf("User contains a NUL byte")
	}
	if strings.IndexByte(c.Password, 0) >= 0 {
		return errBadConfigf("Password contains a NUL byte")
	}
	if strings.IndexByte(c.Database, 0) >= 0 {
		return errBadConfigf("Database contains a NUL byte")
	}
	for _, k := range dsnSortedKeys(c.Params) {
		switch {
		case !libpqdsn.ValidKeyword(k):
			return errBadConfigf("Params key %q: want letters, digits, '_' and '.'", k)
		case k == "host" || k == "port":
			return errBadConfigf("Params[%q]: set Config.Hosts instead", k)
		case k == "user" || k == "password":
			return errBadConfigf("Params[%q]: set Config.User and Config.Password instead", k)
		case k == "dbname" || k == "database":
			return errBadConfigf("Params[%q]: set Config.Database instead", k)
		case k == "hostaddr":
			return errBadConfigf("Params[%q]: hostaddr is not supported; give addresses in Hosts", k)
		case slices.Contains(droppedParams, k):
			return errBadConfigf("Params[%q]: not supported; pgreplica discovers roles and chooses hosts itself", k)
		case isOptionKey(k):
			return errBadConfigf("Params[%q]: pgreplica_* options are DSN syntax; set the Config field instead", k)
		case strings.IndexByte(c.Params[k], 0) >= 0:
			return errBadConfigf("Params[%q] contains a NUL byte", k)
		}
	}
	return nil
}

// LookupFunc resolves a host name into addresses, as pgx's
// pgconn.LookupFunc: each answer is an IP address, or an "ip:port" that
// names its own port.
type LookupFunc func(ctx context.Context, host string) (addrs []string, err error)
