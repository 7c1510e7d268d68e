package prober

import (
	"time"

	"github.com/pgreplica/pgreplica/internal/probe"
)

// Role is what a server answered to pg_is_in_recovery(); the zero Role
// is a probe that got no answer.
type Role uint8

const (
	NoAnswer Role = iota
	Primary
	Replica
)

// Status is one probe's answer. Every subscriber is handed the same one:
// it is never changed once handed out.
type Status struct {
	Role Role
	Err  error  // why the probe failed; nil when it answered
	LSN  uint64 // primary: pg_current_wal_flush_lsn(); replica: replay position
	// Receive is a replica's pg_last_wal_receive_lsn(); Paused is set
	// while its replay is paused.
	Receive  uint64
	Paused   bool
	Timeline uint32
	Sysid    uint64
	// Receiver is a replica's WAL receiver state ("streaming", or "" when
	// it has none); AppName is the name the primary knows it by.
	Receiver, AppName string
	// StatsHidden: the role lacks pg_read_all_stats, so PostgreSQL hides
	// the WAL receiver's state, conninfo and timeline and the standbys'
	// sync_state. ReceiverHidden: a WAL receiver runs but its state is
	// hidden. Denied is what the role may not use at all; User is the
	// role's name.
	StatsHidden, ReceiverHidden bool
	Denied                      probe.Fn
	User                        string
	// SyncStates maps a primary's standbys (application_name) to their
	// sync_state (async, sync, potential, quorum).
	SyncStates map[string]string
	// AsyncDefault: synchronous_commit is off for the role and database.
	AsyncDefault bool
	// ApplyDelay is a replica's recovery_min_apply_delay.
	ApplyDelay time.Duration
	At         time.Time     // when the server ran the probe
	RTT        time.Duration // the probe's round trip; 0 on a new connection
	// Sent is when the probe was sent, on a connection open since
	// ConnSince: a position it read is at or past anything a statement
	// on the same server finished before Sent could have seen, when that
	// statement started after ConnSince (no restart in between).
	Sent, ConnSince time.Time
	// Restarted: the probe connection died since the last probe and a
	// new one answered, or the server's start time changed; the server
	// may have come back behind.
	Restarted bool
	// Server is the server the probe reached; Pooled: a pooler answered
	// on the probe connection.
	Server probe.Server
	Pooled bool
	// Seq numbers the prober's probes (Prober.Started).
	Seq uint64
}
