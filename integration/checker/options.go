package checker

import (
	"cmp"
	"errors"
	"fmt"
	"time"
)

// Options configures one Run. Zero fields take the documented defaults.
type Options struct {
	// Target is how statements are routed; default TargetSession.
	Target Target
	// Driver is pgreplica's inner driver, "pgx" (default) or "pq".
	Driver string
	// Sessions is the number of concurrent workload sessions; default 16.
	Sessions int
	// Keys is the number of rows each session owns; default 8.
	Keys int
	// Duration is how long the sessions run; default 20s.
	Duration time.Duration
	// Seed makes the sessions' and the injector's choices repeatable
	// (timing is not); 0 takes one from the clock. Report.Seed has it.
	Seed uint64
	// Table is the workload's table, recreated by Run and dropped after;
	// default "checker_kv".
	Table string
	// Faults configures the fault injector: lag, paused replay and,
	// with Faults.KillRestart, replicas killed and restarted.
	Faults Faults
	// Logf, if set, receives progress messages.
	Logf func(format string, args ...any)
}

// Defaults.
const (
	DefaultSessions = 16
	DefaultKeys     = 8
	DefaultDuration = 20 * time.Second
	defaultTable    = "checker_kv"
)

func (o Options) withDefaults() Options {
	o.Target = cmp.Or(o.Target, TargetSession)
	o.Driver = cmp.Or(o.Driver, "pgx")
	o.Sessions = cmp.Or(o.Sessions, DefaultSessions)
	o.Keys = cmp.Or(o.Keys, DefaultKeys)
	o.Duration = cmp.Or(o.Duration, DefaultDuration)
	o.Seed = cmp.Or(o.Seed, uint64(time.Now().UnixNano()))
	o.Table = cmp.Or(o.Table, defaultTable)
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	o.Faults = o.Faults.withDefaults()
	return o
}

var errBadOptions = errors.New("checker: invalid options")

func (o *Options) validate() error {
	if _, err := ParseTarget(string(o.Target)); err != nil {
		return fmt.Errorf("%w: %w", errBadOptions, err)
	}
	switch {
	case o.Driver != "pgx" && o.Driver != "pq":
		return fmt.Errorf("%w: driver %q (want pgx or pq)", errBadOptions, o.Driver)
	case o.Target == TargetPgx && o.Driver != "pgx":
		return fmt.Errorf("%w: %s talks pgx, not %s", errBadOptions, TargetPgx, o.Driver)
	case o.Sessions < 2:
		return fmt.Errorf("%w: %d sessions (want at least 2, to read each other's rows)", errBadOptions, o.Sessions)
	case o.Keys < 1:
		return fmt.Errorf("%w: %d keys per session", errBadOptions, o.Keys)
	case o.Duration < 0:
		return fmt.Errorf("%w: negative duration", errBadOptions)
	case !identifier.MatchString(o.Table):
		return fmt.Errorf("%w: table %q is not a plain lower-case identifier", errBadOptions, o.Table)
	}
	return o.Faults.validate()
}
