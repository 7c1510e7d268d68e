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
	// Names reaches the servers through one host name that resolves to
	// every node's address, as a headless Service's does (the pgreplica
	// handle's Config.LookupFunc answers it); database/sql targets only.
	Names bool
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
	// Workload is what each session does; default WorkloadMixed.
	Workload Workload
	// Faults configures the fault injector: lag, paused replay and,
	// with Faults.KillRestart, replicas killed and restarted.
	Faults Faults
	// Logf, if set, receives progress messages.
	Logf func(format string, args ...any)
}

// Workload is what each session does in a round.
type Workload string

const (
	// WorkloadMixed is the checker's own (see loop): writes through every
	// path, reads of its own and of other sessions' hot rows, chases of
	// what the primary showed.
	WorkloadMixed Workload = "mixed"
	// WorkloadCounter is an application's counter, as an outside workload
	// that found a hole the mixed one missed ran it: a session reads its
	// row from the primary (WithPrimary), writes the value plus one, reads
	// it back at once, then reads a random other session's row. Run it
	// with Faults.PausesOnly.
	WorkloadCounter Workload = "counter"
)

// Defaults.
const (
	DefaultSessions = 16
	DefaultKeys     = 8
	DefaultDuration = 20 * time.Second
	defaultTable    = "checker_kv"
)

func (o Options) withDefaults() Options {
	o.Target = cmp.Or(o.Target, TargetSession)
	o.Workload = cmp.Or(o.Workload, WorkloadMixed)
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
	case o.Workload != WorkloadMixed && o.Workload != WorkloadCounter:
		return fmt.Errorf("%w: workload %q (want %s or %s)", errBadOptions, o.Workload, WorkloadMixed, WorkloadCounter)
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
