package pgreplica

import "errors"

// Sentinel errors that callers branch on with errors.Is. Errors returned by
// the driver wrap one of these with context (which host, which option, why).
var (
	// ErrBadDSN reports a data source name that cannot be parsed.
	ErrBadDSN = errors.New("pgreplica: malformed DSN")
	// ErrUnknownOption reports a pgreplica_* parameter (or Config value) the
	// driver does not know; the message names the valid ones.
	ErrUnknownOption = errors.New("pgreplica: unknown option")
	// ErrBadConfig reports a Config value that is out of range.
	ErrBadConfig = errors.New("pgreplica: invalid configuration")
	// ErrNoReachableHost reports that no host of the DSN answered. The
	// error names each host with its cause, and wraps a *HostError for
	// each.
	ErrNoReachableHost = errors.New("pgreplica: no reachable host")
	// ErrAuth reports a host that refused the credentials: a wrong
	// password (SQLSTATE 28P01), or a role that does not exist or that
	// pg_hba.conf does not let in (28000), from either inner driver. It
	// matches through that host's *HostError, so the server's own error
	// stays reachable too (errors.As with *pgconn.PgError or *pq.Error).
	// Trying again does not help: the configuration must change.
	ErrAuth = errors.New("pgreplica: authentication failed")
	// ErrAmbiguousHost reports a host name that resolves to several
	// addresses; such a host gets no statements.
	ErrAmbiguousHost = errors.New("pgreplica: host name resolves to several addresses")
	// ErrNoPrimary reports that no host is out of recovery, or that the
	// primary stopped accepting connections since it was last probed
	// (nothing was sent): writes fail, reads still go to replicas. The
	// error names the hosts that failed with their causes (wrapping a
	// *HostError for each) and those in recovery.
	ErrNoPrimary = errors.New("pgreplica: no primary")
	// ErrSplitBrain reports that more than one host claims to be the primary
	// and the driver cannot tell which one is legitimate; no write is sent.
	ErrSplitBrain = errors.New("pgreplica: more than one primary (split brain)")
	// ErrNoReplica reports a read that had to be served by a replica
	// (FallbackError) when no replica was usable at all: none healthy, or
	// none within the lag bounds. Such an error matches ErrNoFreshReplica
	// too.
	ErrNoReplica = errors.New("pgreplica: no usable replica")
	// ErrNoFreshReplica reports that no replica reached the read's required
	// position (or staleness bound) in time and the fallback policy forbade
	// the primary. The wrapping error says why (timeout, none healthy, ...).
	ErrNoFreshReplica = errors.New("pgreplica: no replica fresh enough")
	// ErrFallbackLimit reports a read that had to fall back to the primary
	// while Config.MaxPrimaryFallbacks reads already did.
	ErrFallbackLimit = errors.New("pgreplica: too many reads falling back to the primary")
	// ErrBadToken reports a consistency token that is garbled, oversized, of
	// an unknown version, forged or expired.
	ErrBadToken = errors.New("pgreplica: bad token")
	// ErrWriteOutcomeUnknown reports a write whose connection was lost after
	// it was sent: it may or may not have committed. It is never retried.
	ErrWriteOutcomeUnknown = errors.New("pgreplica: write outcome unknown (connection lost)")
	// ErrClosed reports use of a connector after Close.
	ErrClosed = errors.New("pgreplica: connector closed")
	// ErrInsufficientPrivilege reports that the connecting role lacks a
	// privilege the driver needs: Config.ExcludeSyncStandby without
	// pg_read_all_stats (pg_monitor), which also matches ErrBadConfig, or
	// a function the router cannot do without (pg_control_system(), the
	// WAL position functions) revoked from the role. Connect and Ping
	// return it; docs/operations.md lists what each feature needs.
	ErrInsufficientPrivilege = errors.New("pgreplica: insufficient privilege")
)

// NoFreshReplicaError is the error of a read that no replica could serve
// and that was not allowed to fall back to the primary. It matches
// errors.Is(err, ErrNoFreshReplica); Reason is ReasonTimeout or
// ReasonNoReplica, and with ReasonNoReplica it matches ErrNoReplica too.
type NoFreshReplicaError struct {
	Reason string
	Detail string
}

func (e *NoFreshReplicaError) Error() string {
	return ErrNoFreshReplica.Error() + ": " + e.Detail
}

// Is makes errors.Is(err, ErrNoFreshReplica) true, and errors.Is(err,
// ErrNoReplica) when no replica was usable at all.
func (e *NoFreshReplicaError) Is(target error) bool {
	return target == ErrNoFreshReplica || target == ErrNoReplica && e.Reason == ReasonNoReplica
}
