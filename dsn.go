package pgreplica

import (
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/pgreplica/pgreplica/internal/dsnopt"
	"github.com/pgreplica/pgreplica/internal/libpqdsn"
)

// The DSN form of Config: ParseDSN, its pgreplica_* options and the DSN
// of each host handed to the inner driver (hostDSN), and the address of a
// host the inner driver dials (isName, pinnedAddr). The libpq syntax
// itself is internal/libpqdsn's.

// ParseDSN parses a data source name in either of libpq's two forms and
// returns the Config it describes.
//
// URL form (scheme postgres:// or postgresql://):
//
//	postgres://app:pw@db1:5432,db2:5433,[::1]:5434/shop?sslmode=disable&pgreplica_driver=pq
//
// Every component is percent-decoded (a '+' stays a '+'). The authority
// holds a comma-separated host list; IPv6 addresses go in brackets; a Unix
// socket directory is written percent-encoded (postgres://%2Fvar%2Frun%2Fpostgresql/shop)
// or given as a parameter (postgres:///shop?host=/var/run/postgresql). A host
// without its own port takes the port parameter (one value for all hosts or
// one per host) and otherwise 5432. Giving hosts both in the authority and in
// a host parameter is an error. Query parameters override the user name,
// password and database of the authority and path, as in libpq.
//
// Keyword/value form:
//
//	host=db1,db2,db3 port=5432,5433,5432 dbname=shop user=app password='it''s' sslmode=disable
//
// Values may be single-quoted; inside quotes \' and \\ escape a quote and a
// backslash, and a quote written twice, as in the example, also stands for
// one quote (an extension: libpq rejects it). Outside quotes a backslash escapes the next
// character. The port list holds either one port, used by every host, or one
// per host; an empty entry means 5432.
//
// In both forms user, password and dbname (or database) fill the Config
// fields, host and port fill Hosts, and every other parameter is copied to
// Params and passed unchanged to the inner driver for each host. These libpq
// parameters are handled specially:
//
//   - target_session_attrs and load_balance_hosts are dropped: pgreplica
//     discovers each host's role itself and chooses hosts per statement.
//   - hostaddr is rejected: pgreplica needs the address in host.
//
// An empty DSN is an error. pgreplica reads no libpq environment variable
// (PGHOST, PGPORT, ...), so the DSN must name at least one host; the inner
// driver may still use the environment and ~/.pgpass for settings the DSN
// leaves out, such as the password or sslmode.
//
// pgreplica's own settings are parameters whose names start with
// "pgreplica_"; they are removed before the rest reaches the inner driver.
// Durations use Go's syntax (150ms, 2s, 1m30s). Omitting an option selects
// its default (see Config); an option whose zero value would silently mean
// "default" rejects 0.
//
//	pgreplica_driver              inner driver: pgx (default) or pq
//	pgreplica_max_conns_per_host  physical connections per host, > 0 (default 10)
//	pgreplica_conn_max_idle_time  close connections idle this long, > 0 (default 5m)
//	pgreplica_conn_max_lifetime   close connections this old, > 0 (default 1h)
//	pgreplica_connect_timeout     bound on each connection attempt, > 0 (default 5s)
//	pgreplica_consistency         reads without a requirement in ctx: process (default), eventual or primary
//	pgreplica_wait_budget         longest wait for a fresh replica, > 0 (default 150ms)
//	pgreplica_fallback            when no replica qualifies: primary (default) or error
//	pgreplica_max_lag             exclude replicas further behind in time, >= 0 (0: no bound)
//	pgreplica_policy              replica choice: round_robin (default), random, least_lag or latency
//	pgreplica_zone                the client's zone; replicas in it are preferred
//	pgreplica_zones               zones of the hosts, comma-separated, one per host in host order
//
// Option names are matched without regard to case. An unknown pgreplica_*
// parameter yields an error wrapping ErrUnknownOption that lists the valid
// ones; a bad value, or any malformed input, yields an error wrapping ErrBadDSN
// that names the parameter. No error ever contains the password.
//
// ParseDSN sets each host's port explicitly but applies no other default:
// zero fields mean the default exactly as in a Config built by hand.
func ParseDSN(dsn string) (Config, error) {
	s := strings.Trim(dsn, libpqdsn.Spaces)
	if s == "" {
		return Config{}, errBadDSNf("empty DSN: name at least one host (pgreplica does not read PGHOST or other libpq environment variables)")
	}
	p, err := libpqdsn.Parse(s)
	if err != nil {
		return Config{}, badSyntax(err)
	}
	c, err := dsnConfig(p)
	if err != nil {
		return Config{}, scrubPassword(err, c.Password)
	}
	return c, nil
}

// dsnError is the error type of DSN and Config problems: a message that
// starts with the first sentinel's text, and the sentinels it wraps.
type dsnError struct {
	msg  string
	errs []error
}

func (e *dsnError) Error() string   { return e.msg }
func (e *dsnError) Unwrap() []error { return e.errs }

func newDSNError(sentinel error, format string, args ...any) *dsnError {
	return &dsnError{msg: sentinel.Error() + ": " + fmt.Sprintf(format, args...), errs: []error{sentinel}}
}

func errBadDSNf(format string, args ...any) error { return newDSNError(ErrBadDSN, format, args...) }

// badSyntax gives a syntax error of libpqdsn the face of every DSN error,
// ErrBadDSN's prefix and sentinel; its text already keeps passwords out.
func badSyntax(err error) error { return errBadDSNf("%s", err.Error()) }

// scrubPassword is a last line of defence: should a message quote something
// that happens to contain the password, the password is masked.
func scrubPassword(err error, password string) error {
	e, ok := err.(*dsnError)
	if !ok {
		return err
	}
	if msg := libpqdsn.Redact(e.msg, password); msg != e.msg {
		return &dsnError{msg: msg, errs: e.errs}
	}
	return err
}

// Parameters that never reach Params.
var (
	// droppedParams are accepted and ignored: pgreplica does their job.
	droppedParams = []string{"target_session_attrs", "load_balance_hosts"}
	// reservedParams are carried by Config fields, or unsupported.
	reservedParams = []string{"host", "hostaddr", "port", "user", "password", "dbname", "database"}
)

const dsnOptionPrefix = "pgreplica_"

func isOptionKey(k string) bool {
	return len(k) >= len(dsnOptionPrefix) && strings.EqualFold(k[:len(dsnOptionPrefix)], dsnOptionPrefix)
}

// dsnConfig interprets the parameters.
func dsnConfig(p libpqdsn.DSN) (Config, error) {
	var (
		c    Config
		opts = map[string]string{}
	)
	for _, kv := range p.Params {
		k, v := kv.Key, kv.Val
		switch {
		case k == "user":
			c.User = v
		case k == "password":
			c.Password = v
		case k == "dbname" || k == "database":
			c.Database = v
		case k == "host" || k == "port":
			// Read by p.Hosts.
		case k == "hostaddr":
			return c, errBadDSNf("hostaddr is not supported: give each server's name or IP address in host")
		case slices.Contains(droppedParams, k):
			// pgreplica discovers roles and balances reads itself.
		case isOptionKey(k):
			name := strings.ToLower(k)
			if findDSNOption(name) == nil {
				return c, unknownOptionError(k)
			}
			opts[name] = v
		default:
			if !libpqdsn.ValidKeyword(k) {
				return c, errBadDSNf("invalid parameter name %q", k)
			}
			if c.Params == nil {
				c.Params = map[string]string{}
			}
			c.Params[k] = v
		}
	}
	hosts, err := p.Hosts()
	if err != nil {
		return c, badSyntax(err)
	}
	c.Hosts = make([]Host, len(hosts))
	for i, h := range hosts {
		c.Hosts[i] = Host{Addr: h.Addr, Port: h.Port}
	}
	for _, o := range dsnOptions {
		v, ok := opts[o.name]
		if !ok {
			continue
		}
		if err := o.bind(&c).Set(v); err != nil {
			return c, errBadDSNf("%s=%q: %v", o.name, v, err)
		}
	}
	if err := c.validate(); err != nil {
		var de *dsnError
		if e, ok := err.(*dsnError); ok {
			de = &dsnError{msg: ErrBadDSN.Error() + ": " + strings.TrimPrefix(e.msg, ErrBadConfig.Error()+": "), errs: append([]error{ErrBadDSN}, e.errs...)}
		} else {
			de = &dsnError{msg: ErrBadDSN.Error() + ": " + err.Error(), errs: []error{ErrBadDSN, err}}
		}
		return c, de
	}
	return c, nil
}

// unknownOptionError names a bad pgreplica_* parameter and the valid ones.
func unknownOptionError(name string) error {
	names := make([]string, len(dsnOptions))
	for i, o := range dsnOptions {
		names[i] = o.name
	}
	sort.Strings(names)
	hint := ""
	if why, ok := removedOptions[strings.ToLower(name)]; ok {
		hint = " (removed: " + why + ")"
	} else if s := dsnopt.Closest(strings.ToLower(name), names); s != "" {
		hint = fmt.Sprintf(" (did you mean %s?)", s)
	}
	return newDSNError(ErrUnknownOption, "%q%s; valid pgreplica options: %s", name, hint, strings.Join(names, ", "))
}

// ---- pgreplica_* options ----

// removedOptions are the options of earlier development versions, each
// with what took its place, so a DSN that still carries one fails with a
// reason rather than a guess.
var removedOptions = map[string]string{
	"pgreplica_default":               "renamed pgreplica_consistency",
	"pgreplica_health_check_after":    "idle connections are pinged after 1s",
	"pgreplica_monitor_interval":      "the monitor probes every 250ms while statements run, every second while idle",
	"pgreplica_idle_monitor_interval": "the monitor probes every second while idle",
	"pgreplica_probe_timeout":         "a host that does not answer a probe for 1s is down",
	"pgreplica_hedge_delay":           "a read is hedged after what its replica's recent answers predict, at least 50ms",
	"pgreplica_max_hedge_percent":     "hedges are at most 5% of replica reads",
	"pgreplica_read_after_write":      "a read after a write no replica can have yet goes to the primary",
	"pgreplica_fallback_wait":         "a read waits for a fallback slot within its context's deadline",
	"pgreplica_stale_fallback_lag":    "fallback=stale is gone: use pgreplica_max_lag, or WithMaxStaleness in the context",
	"pgreplica_max_primary_fallbacks": "reads that fell back use at most half of pgreplica_max_conns_per_host",
	"pgreplica_max_lag_bytes":         "use pgreplica_max_lag, a bound in time",
	"pgreplica_exclude_sync_standby":  "synchronous standbys serve reads like any replica",
}

// option is one pgreplica_* parameter: its name, its documentation and the
// Config setting it binds to.
type dsnOption struct {
	name string
	doc  string
	bind func(c *Config) dsnopt.Value
}

// options is the one table of pgreplica_* parameters. Adding a setting is
// adding a line here (and to the ParseDSN doc, which a test checks).
var dsnOptions = []dsnOption{
	{"pgreplica_driver", "inner driver: pgx (default) or pq", func(c *Config) dsnopt.Value { return dsnopt.Enum(&c.Driver, driverNames) }},
	{"pgreplica_max_conns_per_host", "physical connections per host, > 0 (default 10)", func(c *Config) dsnopt.Value { return dsnopt.Int{P: &c.MaxConnsPerHost, Min: 1} }},
	{"pgreplica_conn_max_idle_time", "close connections idle this long, > 0 (default 5m)", func(c *Config) dsnopt.Value { return dsnopt.Duration{P: &c.ConnMaxIdleTime, Rule: dsnopt.Positive} }},
	{"pgreplica_conn_max_lifetime", "close connections this old, > 0 (default 1h)", func(c *Config) dsnopt.Value { return dsnopt.Duration{P: &c.ConnMaxLifetime, Rule: dsnopt.Positive} }},
	{"pgreplica_connect_timeout", "bound on each connection attempt, > 0 (default 5s)", func(c *Config) dsnopt.Value { return dsnopt.Duration{P: &c.ConnectTimeout, Rule: dsnopt.Positive} }},
	{"pgreplica_consistency", "reads without a requirement in ctx: process (default), eventual or primary", func(c *Config) dsnopt.Value { return dsnopt.Enum(&c.Consistency, consistencyNames) }},
	{"pgreplica_wait_budget", "longest wait for a fresh replica, > 0 (default 150ms)", func(c *Config) dsnopt.Value { return dsnopt.Duration{P: &c.WaitBudget, Rule: dsnopt.Positive} }},
	{"pgreplica_fallback", "when no replica qualifies: primary (default) or error", func(c *Config) dsnopt.Value { return dsnopt.Enum(&c.Fallback, fallbackNames) }},
	{"pgreplica_max_lag", "exclude replicas further behind in time, >= 0 (0: no bound)", func(c *Config) dsnopt.Value { return dsnopt.Duration{P: &c.MaxLag, Rule: dsnopt.NonNegative} }},
	{"pgreplica_policy", "replica choice: round_robin (default), random, least_lag or latency", func(c *Config) dsnopt.Value { return dsnopt.Enum(&c.Policy, policyNames) }},
	{"pgreplica_zone", "the client's zone; replicas in it are preferred", func(c *Config) dsnopt.Value { return dsnopt.String{P: &c.Zone} }},
	{"pgreplica_zones", "zones of the hosts, comma-separated, one per host in host order", func(c *Config) dsnopt.Value { return dsnZonesOpt{c} }},
}

func findDSNOption(name string) *dsnOption {
	for i := range dsnOptions {
		if dsnOptions[i].name == name {
			return &dsnOptions[i]
		}
	}
	return nil
}

// dsnZonesOpt sets Host.Zone of every host from a list in host order.
type dsnZonesOpt struct{ c *Config }

func (o dsnZonesOpt) Set(s string) error {
	zones := libpqdsn.SplitList(s)
	if len(zones) != len(o.c.Hosts) {
		return fmt.Errorf("%d zones for %d hosts: give one zone per host, in host order (empty for none)", len(zones), len(o.c.Hosts))
	}
	for i, z := range zones {
		o.c.Hosts[i].Zone = z
	}
	return nil
}

func (o dsnZonesOpt) String() string {
	z := make([]string, len(o.c.Hosts))
	for i, h := range o.c.Hosts {
		z[i] = h.Zone
	}
	return strings.Join(z, ",")
}

func (o dsnZonesOpt) IsZero() bool {
	return !slices.ContainsFunc(o.c.Hosts, func(h Host) bool { return h.Zone != "" })
}

// ---- DSN output ----

// hostDSN returns a keyword/value DSN for one host, for the inner driver:
// host, port, user, password, dbname, then every Params entry in key order.
// Every value is single-quoted with ' and \ escaped, which both
// pgx.ParseConfig and pq.NewConnector read back verbatim. Empty user,
// password and dbname are left out so the inner driver's defaults apply.
func (c Config) hostDSN(h Host) string {
	var b strings.Builder
	port := h.Port
	if port == 0 {
		port = defaultPort
	}
	libpqdsn.WriteParam(&b, "host", h.Addr, true)
	libpqdsn.WriteParam(&b, "port", strconv.Itoa(int(port)), true)
	for _, f := range [...]struct{ k, v string }{{"user", c.User}, {"password", c.Password}, {"dbname", c.Database}} {
		if f.v != "" {
			libpqdsn.WriteParam(&b, f.k, f.v, true)
		}
	}
	for _, k := range dsnSortedKeys(c.Params) {
		if isReservedParam(k) {
			continue
		}
		libpqdsn.WriteParam(&b, k, c.Params[k], true)
	}
	return b.String()
}

// redacted returns c as a keyword/value DSN for logs and error messages,
// with the password (and any parameter whose name contains "password")
// replaced by xxxxx. It lists every host and each pgreplica option that is
// not zero; apart from the password, ParseDSN reads it back to c.
func (c Config) redacted() string {
	var b strings.Builder
	if len(c.Hosts) > 0 {
		addrs := make([]string, len(c.Hosts))
		ports := make([]string, len(c.Hosts))
		for i, h := range c.Hosts {
			addrs[i] = h.Addr
			p := h.Port
			if p == 0 {
				p = defaultPort
			}
			ports[i] = strconv.Itoa(int(p))
		}
		libpqdsn.WriteParam(&b, "host", strings.Join(addrs, ","), false)
		libpqdsn.WriteParam(&b, "port", strings.Join(ports, ","), false)
	}
	if c.User != "" {
		libpqdsn.WriteParam(&b, "user", c.User, false)
	}
	if c.Password != "" {
		libpqdsn.WriteParam(&b, "password", libpqdsn.Masked, false)
	}
	if c.Database != "" {
		libpqdsn.WriteParam(&b, "dbname", c.Database, false)
	}
	for _, k := range dsnSortedKeys(c.Params) {
		v := c.Params[k]
		if libpqdsn.IsSecret(k) {
			v = libpqdsn.Masked
		}
		libpqdsn.WriteParam(&b, k, v, false)
	}
	for _, o := range dsnOptions {
		if v := o.bind(&c); !v.IsZero() {
			libpqdsn.WriteParam(&b, o.name, v.String(), false)
		}
	}
	return b.String()
}

func isReservedParam(k string) bool {
	return slices.Contains(reservedParams, k) || slices.Contains(droppedParams, k) || isOptionKey(k)
}

func dsnSortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// isName reports whether a configured address is a host name to look up
// (not an IP address nor a Unix socket directory).
func isName(addr string) bool {
	return addr != "" && !strings.HasPrefix(addr, "/") && net.ParseIP(addr) == nil
}

// pinnedAddr is the address to dial for a node pinned to pin (an IP, or
// an "ip:port" a resolver gave) when the inner driver asks for address
// ("host:port").
func pinnedAddr(pin, address string) string {
	if _, _, err := net.SplitHostPort(pin); err == nil {
		return pin
	}
	_, port, err := net.SplitHostPort(address)
	if err != nil {
		return address
	}
	return net.JoinHostPort(pin, port)
}
