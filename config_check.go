package pgreplica

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/pgreplica/pgreplica/internal/dsnopt"
	"github.com/pgreplica/pgreplica/internal/libpqdsn"
)

// Checking a Config: its documented defaults (withDefaults) and the values
// it may not take (validate).

// withDefaults returns a copy of c with every zero field set to its
// documented default. Hosts, Params and TokenKey are copied, so later changes
// to the caller's Config do not reach the copy. Negative values are kept for
// validate to report (a negative HealthCheckAfter disables the check).
func (c Config) withDefaults() Config {
	c.Hosts = slices.Clone(c.Hosts)
	for i := range c.Hosts {
		c.Hosts[i].Port = cmp.Or(c.Hosts[i].Port, defaultPort)
	}
	c.Params = maps.Clone(c.Params)
	c.TokenKey = slices.Clone(c.TokenKey)
	c.Driver = cmp.Or(c.Driver, DriverPgx)
	c.MaxConnsPerHost = cmp.Or(c.MaxConnsPerHost, defaultMaxConnsPerHost)
	c.ConnMaxIdleTime = cmp.Or(c.ConnMaxIdleTime, defaultConnMaxIdleTime)
	c.ConnMaxLifetime = cmp.Or(c.ConnMaxLifetime, defaultConnMaxLifetime)
	c.HealthCheckAfter = cmp.Or(c.HealthCheckAfter, defaultHealthCheckAfter)
	c.ConnectTimeout = cmp.Or(c.ConnectTimeout, defaultConnectTimeout)
	c.MonitorInterval = cmp.Or(c.MonitorInterval, defaultMonitorInterval)
	c.IdleMonitorInterval = max(cmp.Or(c.IdleMonitorInterval, idleMonitorFactor*c.MonitorInterval), c.MonitorInterval)
	c.ProbeTimeout = cmp.Or(c.ProbeTimeout, defaultProbeTimeout)
	c.HedgeDelay = cmp.Or(c.HedgeDelay, defaultHedgeDelay)
	c.MaxHedgePercent = cmp.Or(c.MaxHedgePercent, defaultMaxHedgePercent)
	c.WaitBudget = cmp.Or(c.WaitBudget, defaultWaitBudget)
	c.FallbackWait = cmp.Or(c.FallbackWait, defaultFallbackWait)
	c.Fallback = cmp.Or(c.Fallback, FallbackPrimary)
	c.MaxPrimaryFallbacks = cmp.Or(c.MaxPrimaryFallbacks, defaultMaxPrimaryFallbacks)
	// DefaultConsistency (ConsistencyProcess) and Policy (PolicyRoundRobin)
	// default to their zero values.
	return c
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
	if c.MaxConnsPerHost < 0 {
		return errBadConfigf("MaxConnsPerHost is %d; want > 0, or 0 for the default %d", c.MaxConnsPerHost, defaultMaxConnsPerHost)
	}
	if c.MaxHedgePercent < 0 || c.MaxHedgePercent > 100 {
		return errBadConfigf("MaxHedgePercent is %d; want 1 to 100, or 0 for the default %d", c.MaxHedgePercent, defaultMaxHedgePercent)
	}
	if c.MaxPrimaryFallbacks < 0 {
		return errBadConfigf("MaxPrimaryFallbacks is %d; want > 0, or 0 for the default %d", c.MaxPrimaryFallbacks, defaultMaxPrimaryFallbacks)
	}
	for _, d := range [...]struct {
		name string
		v    time.Duration
	}{
		{"ConnMaxIdleTime", c.ConnMaxIdleTime},
		{"ConnMaxLifetime", c.ConnMaxLifetime},
		{"ConnectTimeout", c.ConnectTimeout},
		{"MonitorInterval", c.MonitorInterval},
		{"IdleMonitorInterval", c.IdleMonitorInterval},
		{"ProbeTimeout", c.ProbeTimeout},
		{"WaitBudget", c.WaitBudget},
		{"FallbackWait", c.FallbackWait},
		{"TokenTTL", c.TokenTTL},
		{"MaxLag", c.MaxLag},
		// HealthCheckAfter and HedgeDelay may be negative: that disables
		// them.
	} {
		if d.v < 0 {
			return errBadConfigf("%s is %v; want >= 0 (0 selects the default)", d.name, d.v)
		}
	}
	if !dsnopt.Named(consistencyNames, c.DefaultConsistency) {
		return errBadConfigf("DefaultConsistency is %d; want ConsistencyProcess, ConsistencyEventual or ConsistencyPrimary", int(c.DefaultConsistency))
	}
	if c.Fallback != FallbackDefault && !dsnopt.Named(fallbackNames, c.Fallback) {
		return errBadConfigf("Fallback is %d; want FallbackDefault, FallbackPrimary, FallbackError or FallbackStale", int(c.Fallback))
	}
	if c.StaleFallbackLag < 0 {
		return errBadConfigf("StaleFallbackLag is negative")
	}
	if len(c.Hosts) > maxHosts {
		return errBadConfigf("%d hosts; at most %d are supported", len(c.Hosts), maxHosts)
	}
	if !dsnopt.Named(readAfterWriteNames, c.ReadAfterWrite) {
		return errBadConfigf("ReadAfterWrite is %d; want ReadAfterWritePrimary or ReadAfterWriteReplica", int(c.ReadAfterWrite))
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
