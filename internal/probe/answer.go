package probe

import (
	"database/sql/driver"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Answer is one probe's answer (Query) as the server gave it: a plain
// value, which the router copies into what it keeps of the node.
type Answer struct {
	Replica bool // pg_is_in_recovery()
	// LSN is a primary's pg_current_wal_flush_lsn(), a replica's replay
	// LSN; Receive a replica's pg_last_wal_receive_lsn().
	LSN, Receive uint64
	Paused       bool // a replica's replay is paused
	Timeline     uint32
	// AsyncDefault: synchronous_commit is off for the role and database.
	AsyncDefault bool
	// ApplyDelay is a replica's recovery_min_apply_delay.
	ApplyDelay time.Duration
	// Receiver is a replica's WAL receiver state ("streaming", or "" when
	// it has none); AppName the name the primary knows it by.
	// ReceiverHidden: a WAL receiver runs but the role may not see it.
	Receiver, AppName string
	ReceiverHidden    bool
	// SyncStates maps a primary's standbys (application_name) to their
	// sync_state (async, sync, potential, quorum); nil when it has none or
	// the probe left them out.
	SyncStates map[string]string
	// StatsVisible: the role has pg_read_all_stats, without which
	// PostgreSQL hides the WAL receiver's state, conninfo and timeline and
	// the standbys' sync_state.
	StatsVisible bool
	// Server is the server that answered; its Sysid is 0 in a light
	// probe's answer.
	Server Server
	// PID is the backend's process id (0: unknown).
	PID uint32
}

// Parse reads Query's answer, its Columns values.
func Parse(vals []driver.Value) (Answer, error) {
	var a Answer
	var err error
	a.Replica, _ = vals[0].(bool)
	if a.LSN, err = LSN(vals[1]); err != nil {
		return Answer{}, err
	}
	if a.Receive, err = LSN(vals[2]); err != nil {
		return Answer{}, err
	}
	a.Paused, _ = vals[3].(bool)
	tl, err := Int(vals[4])
	if err != nil {
		return Answer{}, err
	}
	a.Timeline = uint32(tl)
	a.AsyncDefault, _ = vals[6].(bool)
	if a.Replica {
		if a.ApplyDelay, err = parseDelay(Text(vals[8])); err != nil {
			return Answer{}, err
		}
	}
	if a.Server, err = serverOf(vals[5], vals[10], vals[11], vals[12]); err != nil {
		return Answer{}, err
	}
	if pid, err := Int(vals[13]); err == nil {
		a.PID = uint32(pid)
	}
	a.StatsVisible, _ = vals[9].(bool)
	info := Text(vals[7])
	if a.Replica {
		// "streaming replica1": the WAL receiver's state and the name
		// the primary knows this replica by; " " when one runs but the
		// role may not see them, "" when none runs.
		var running bool
		a.Receiver, a.AppName, running = strings.Cut(info, " ")
		a.ReceiverHidden = running && a.Receiver == ""
	} else if info != "" {
		a.SyncStates = map[string]string{}
		for _, kv := range strings.Split(info, ",") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				a.SyncStates[k] = v
			}
		}
	}
	return a, nil
}

// parseDelay reads a time setting as current_setting shows it ("0",
// "300ms", "2s", "1min", …).
func parseDelay(s string) (time.Duration, error) {
	i := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	if i < 0 {
		i = len(s)
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("probe: recovery_min_apply_delay %q", s)
	}
	unit := map[string]time.Duration{"": time.Millisecond, "us": time.Microsecond, "ms": time.Millisecond,
		"s": time.Second, "min": time.Minute, "h": time.Hour, "d": 24 * time.Hour}[s[i:]]
	if unit == 0 || n > math.MaxInt64/int64(unit) {
		return 0, fmt.Errorf("probe: recovery_min_apply_delay %q", s)
	}
	return time.Duration(n) * unit, nil
}
