package pgreplica

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/pgreplica/pgreplica/internal/probe"
)

// What the connecting role may see. PostgreSQL lets every role (PUBLIC)
// execute each function the driver calls, but it shows the replication
// views' interesting columns only to roles with the privileges of
// pg_read_all_stats (pg_monitor includes it): to anyone else
// pg_stat_wal_receiver has its pid and NULL status, conninfo and
// received_tli, and pg_stat_replication NULL state and sync_state. The
// monitor asks pg_has_role on every probe, so a GRANT takes effect at the
// next one. A platform may also revoke functions from PUBLIC: the prober
// checks them when it connects (internal/probe lists them: probe.Fn) and
// does without those it can, or fails loudly (ErrInsufficientPrivilege,
// deniedError) for those it cannot.

// StatusNeedsMonitor is what NodeStatus.Receiver and NodeStatus.SyncState
// read when PostgreSQL hides them from the connecting role (it lacks
// pg_read_all_stats, which pg_monitor includes).
const StatusNeedsMonitor = "unknown (needs pg_monitor)"

// privilegeError is an error matching ErrInsufficientPrivilege.
type privilegeError struct {
	msg string
}

func (e *privilegeError) Error() string { return e.msg }

func (e *privilegeError) Is(target error) bool {
	return target == ErrInsufficientPrivilege
}

// deniedError is a probe's error when the role may not use a function the
// router needs: the host is not unreachable, it cannot be used.
func deniedError(user string, denied probe.Fn) error {
	names := denied.Names()
	return &privilegeError{msg: fmt.Sprintf(
		"%v: role %q may not execute %s, which the router needs (GRANT EXECUTE ON FUNCTION %s TO %s)",
		ErrInsufficientPrivilege, user, names, names, probe.QuoteIdent(user))}
}

// privilegeErr is what Connect and Ping return when the role lacks a
// privilege the driver needs, nil otherwise. Roles and grants are
// cluster-wide (physical replication copies the catalogs), so any host's
// answer speaks for all.
func (t *topology) privilegeErr() error {
	for i := range t.nodes {
		v := &t.nodes[i]
		if !v.probed {
			continue
		}
		var pe *privilegeError
		if errors.As(v.status.err, &pe) {
			return pe
		}
	}
	return nil
}

// syncHidden reports that the node cannot show its standbys' sync_state.
func (s *nodeStatus) syncHidden() bool { return s.statsHidden || s.denied&probe.FnReplication != 0 }

// privilegeWarnings are the warnings of what the role cannot see that a
// connector has logged: each once.
type privilegeWarnings struct {
	hidden, denied atomic.Bool
}

// warn logs, once per connector, what the role cannot see.
func (w *privilegeWarnings) warn(log *slog.Logger, st *nodeStatus) {
	if st.statsHidden && w.hidden.CompareAndSwap(false, true) {
		log.Warn("pgreplica: the connecting role cannot see replication state (GRANT pg_monitor to it)",
			"role", st.user,
			"hidden", "pg_stat_wal_receiver status, conninfo, received_tli; pg_stat_replication sync_state",
			"effects", "status shows "+StatusNeedsMonitor+"; a replica's timeline is the one of its last restartpoint, so after a failover it gets reads only once it has made one")
	}
	if opt := st.denied &^ probe.RequiredFns; opt != 0 && w.denied.CompareAndSwap(false, true) {
		log.Warn("pgreplica: the connecting role may not use functions the monitor reads; it does without them",
			"role", st.user, "denied", opt.Names(), "effects", opt.Effects())
	}
}
