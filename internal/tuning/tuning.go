// Package tuning holds the driver's internal timings and budgets: how often
// the monitor probes, when a slow read is hedged, when an idle connection
// is pinged. They are not settings: their defaults are right for every
// deployment the tests and benchmarks cover, so users are not asked to
// weigh them. Tests shorten or switch them off to make a behaviour
// deterministic or quick; they reach a Config through Set. So do the
// project's own tools that watch a cluster without running statements
// (pgreplica status, pgreplica-dev), to poll faster than an idle
// connector would.
package tuning

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/pgreplica/pgreplica/internal/libpqdsn"
)

// Knobs are the internal timings and budgets. A zero field takes the
// driver's default.
type Knobs struct {
	// MonitorInterval: how often the monitor probes while statements run
	// (default 250ms).
	MonitorInterval time.Duration
	// IdleMonitorInterval: how often while none ran for a MonitorInterval
	// (default 4 × MonitorInterval, never less than it).
	IdleMonitorInterval time.Duration
	// ProbeTimeout: a host that does not answer a probe this long is down
	// (default 1s).
	ProbeTimeout time.Duration
	// HealthCheckAfter: a pooled connection idle longer is pinged before
	// use (default 1s); negative: never.
	HealthCheckAfter time.Duration
	// HedgeDelay: the shortest wait before a slow replica read is also
	// sent to another replica (default 50ms); negative: no hedging.
	HedgeDelay time.Duration
	// MaxHedgePercent: hedges as a share of replica reads (default 5).
	MaxHedgePercent int
	// WaitAfterWrite: a read after a write too recent for any replica
	// waits for a replica instead of going to the primary, so tests can
	// watch the replica path.
	WaitAfterWrite bool
}

// Set attaches k to the *pgreplica.Config cfg points to. Package
// pgreplica installs it when it initialises and never changes it; it is
// a variable only because pgreplica imports this package.
var Set func(cfg any, k Knobs)

// Prefix starts the test-only DSN parameters Split takes out.
const Prefix = "tuning_"

// Split takes the tuning_* parameters (tuning_monitor_interval=1h,
// tuning_hedge_delay=-1s, tuning_wait_after_write=true, ...) out of a DSN
// in either form, a URL or key/value pairs, and returns the rest and the
// knobs they set. Tests use it to keep their DSNs in one string; the
// driver itself would pass these parameters on to the server, which
// refuses them. A DSN without any is returned unchanged; one in
// key/value form that has some is written anew, its values quoted where
// they need it.
func Split(dsn string) (string, Knobs, error) {
	if !strings.Contains(dsn, Prefix) {
		return dsn, Knobs{}, nil
	}
	if isURL(dsn) {
		return splitURL(dsn)
	}
	return splitKeyword(dsn)
}

// isURL reports whether dsn has the URL form (postgres:// or
// postgresql://).
func isURL(dsn string) bool {
	s := strings.ToLower(strings.TrimLeft(dsn, libpqdsn.Spaces))
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

func splitURL(dsn string) (string, Knobs, error) {
	var k Knobs
	base, query, ok := strings.Cut(dsn, "?")
	if !ok {
		return dsn, k, nil
	}
	var kept []string
	for _, p := range strings.Split(query, "&") {
		name, v, _ := strings.Cut(p, "=")
		if !strings.HasPrefix(name, Prefix) {
			kept = append(kept, p)
			continue
		}
		v, err := url.QueryUnescape(v)
		if err == nil {
			err = k.set(strings.TrimPrefix(name, Prefix), v)
		}
		if err != nil {
			return dsn, k, err
		}
	}
	if len(kept) == 0 {
		return base, k, nil
	}
	return base + "?" + strings.Join(kept, "&"), k, nil
}

func splitKeyword(dsn string) (string, Knobs, error) {
	var k Knobs
	p, err := libpqdsn.Parse(dsn)
	if err != nil {
		return dsn, k, fmt.Errorf("tuning: %w", err)
	}
	var b strings.Builder
	for _, kv := range p.Params {
		if !strings.HasPrefix(kv.Key, Prefix) {
			libpqdsn.WriteParam(&b, kv.Key, kv.Val, false)
			continue
		}
		if err := k.set(strings.TrimPrefix(kv.Key, Prefix), kv.Val); err != nil {
			return dsn, k, err
		}
	}
	return b.String(), k, nil
}

func (k *Knobs) set(name, v string) error {
	durations := map[string]*time.Duration{
		"monitor_interval": &k.MonitorInterval, "idle_monitor_interval": &k.IdleMonitorInterval,
		"probe_timeout": &k.ProbeTimeout, "health_check_after": &k.HealthCheckAfter, "hedge_delay": &k.HedgeDelay,
	}
	var err error
	if p, ok := durations[name]; ok {
		*p, err = time.ParseDuration(v)
	} else {
		switch name {
		case "max_hedge_percent":
			k.MaxHedgePercent, err = strconv.Atoi(v)
		case "wait_after_write":
			k.WaitAfterWrite, err = strconv.ParseBool(v)
		default:
			return fmt.Errorf("tuning: unknown parameter %s%s", Prefix, name)
		}
	}
	if err != nil {
		return fmt.Errorf("tuning: %s%s: %w", Prefix, name, err)
	}
	return nil
}
