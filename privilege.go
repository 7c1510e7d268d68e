package pgreplica

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
)

// What the connecting role may see. PostgreSQL lets every role (PUBLIC)
// execute each function the driver calls, but it shows the replication
// views' interesting columns only to roles with the privileges of
// pg_read_all_stats (pg_monitor includes it): to anyone else
// pg_stat_wal_receiver has its pid and NULL status, conninfo and
// received_tli, and pg_stat_replication NULL state and sync_state. The
// monitor asks pg_has_role on every probe, so a GRANT takes effect at the
// next one. A platform may also revoke functions from PUBLIC: the monitor
// checks them when it connects and does without those it can, or fails
// loudly (ErrInsufficientPrivilege) for those it cannot.

// StatusNeedsMonitor is what NodeStatus.Receiver and NodeStatus.SyncState
// read when PostgreSQL hides them from the connecting role (it lacks
// pg_read_all_stats, which pg_monitor includes).
const StatusNeedsMonitor = "unknown (needs pg_monitor)"

// probeFn is one function or view the driver uses, as a bit of a set.
type probeFn uint16

const (
	fnInRecovery        probeFn = 1 << iota // pg_is_in_recovery()
	fnCurrentLSN                            // pg_current_wal_lsn()
	fnFlushLSN                              // pg_current_wal_flush_lsn()
	fnInsertLSN                             // pg_current_wal_insert_lsn()
	fnReplayLSN                             // pg_last_wal_replay_lsn()
	fnControlSystem                         // pg_control_system()
	fnReceiveLSN                            // pg_last_wal_receive_lsn()
	fnReplayPaused                          // pg_is_wal_replay_paused()
	fnControlCheckpoint                     // pg_control_checkpoint()
	fnWalfileName                           // pg_walfile_name(pg_lsn)
	fnWalReceiver                           // the pg_stat_wal_receiver view
	fnReplication                           // the pg_stat_replication view
	fnHasRole                               // pg_has_role(name, name, text)
	fnSetting                               // current_setting(text)
)

// requiredFns are those the router cannot do without: roles, positions
// and the cluster's identity (which keys sessions and tokens).
const requiredFns = fnInRecovery | fnCurrentLSN | fnFlushLSN | fnInsertLSN | fnReplayLSN | fnControlSystem

// probeFns describes each probeFn in bit order: its name, the SQL that is
// true when the role may use it, and what the driver does without it.
var probeFns = []struct {
	name, allowed, without string
}{
	{"pg_is_in_recovery()", "has_function_privilege(to_regprocedure('pg_is_in_recovery()'), 'EXECUTE')", ""},
	{"pg_current_wal_lsn()", "has_function_privilege(to_regprocedure('pg_current_wal_lsn()'), 'EXECUTE')", ""},
	{"pg_current_wal_flush_lsn()", "has_function_privilege(to_regprocedure('pg_current_wal_flush_lsn()'), 'EXECUTE')", ""},
	{"pg_current_wal_insert_lsn()", "has_function_privilege(to_regprocedure('pg_current_wal_insert_lsn()'), 'EXECUTE')", ""},
	{"pg_last_wal_replay_lsn()", "has_function_privilege(to_regprocedure('pg_last_wal_replay_lsn()'), 'EXECUTE')", ""},
	{"pg_control_system()", "has_function_privilege(to_regprocedure('pg_control_system()'), 'EXECUTE')", ""},
	{"pg_last_wal_receive_lsn()", "has_function_privilege(to_regprocedure('pg_last_wal_receive_lsn()'), 'EXECUTE')",
		"replicas' received positions are not shown"},
	{"pg_is_wal_replay_paused()", "has_function_privilege(to_regprocedure('pg_is_wal_replay_paused()'), 'EXECUTE')",
		"a paused replica is not shown as paused"},
	{"pg_control_checkpoint()", "has_function_privilege(to_regprocedure('pg_control_checkpoint()'), 'EXECUTE')",
		"a replica whose WAL receiver's timeline is not visible has no known timeline"},
	{"pg_walfile_name(pg_lsn)", "has_function_privilege(to_regprocedure('pg_walfile_name(pg_lsn)'), 'EXECUTE')",
		"the primary's timeline is read from its last checkpoint"},
	{"pg_stat_wal_receiver", "has_table_privilege(to_regclass('pg_stat_wal_receiver'), 'SELECT') AND has_function_privilege(to_regprocedure('pg_stat_get_wal_receiver()'), 'EXECUTE')",
		"replicas' WAL receiver state and timeline are unknown"},
	{"pg_stat_replication", "has_table_privilege(to_regclass('pg_stat_replication'), 'SELECT') AND has_function_privilege(to_regprocedure('pg_stat_get_wal_senders()'), 'EXECUTE') AND has_function_privilege(to_regprocedure('pg_stat_get_activity(integer)'), 'EXECUTE')",
		"synchronous standbys are unknown"},
	{"pg_has_role(name, name, text)", "has_function_privilege(to_regprocedure('pg_has_role(name, name, text)'), 'EXECUTE')",
		"replication state is assumed hidden"},
	{"current_setting(text)", "has_function_privilege(to_regprocedure('current_setting(text)'), 'EXECUTE')",
		"synchronous_commit is assumed on and recovery_min_apply_delay 0"},
}

// privilegeSQL answers, for each probeFn in bit order, whether the role
// is denied it (NULL, taken as allowed, for one the server does not
// have), then current_user.
var privilegeSQL = func() string {
	cols := make([]string, len(probeFns))
	for i, f := range probeFns {
		cols[i] = "NOT (" + f.allowed + ")"
	}
	return "SELECT " + strings.Join(cols, ",\n ") + ",\n current_user"
}()

// checkPrivileges returns the probeFns the role of c may not use, and the
// role's name.
func checkPrivileges(ctx context.Context, c driver.Conn) (probeFn, string, error) {
	rows, err := queryInner(ctx, c, privilegeSQL, nil)
	if err != nil {
		return 0, "", fmt.Errorf("probe: checking privileges: %w", err)
	}
	defer rows.Close()
	vals := make([]driver.Value, len(probeFns)+1)
	if err := rows.Next(vals); err != nil {
		return 0, "", fmt.Errorf("probe: checking privileges: %w", err)
	}
	var denied probeFn
	for i := range probeFns {
		if b, _ := vals[i].(bool); b {
			denied |= 1 << i
		}
	}
	return denied, textValue(vals[len(probeFns)]), nil
}

// names lists the functions and views of s.
func (s probeFn) names() string {
	var out []string
	for i, f := range probeFns {
		if s&(1<<i) != 0 {
			out = append(out, f.name)
		}
	}
	return strings.Join(out, ", ")
}

// effects says what the driver does without the optional members of s.
func (s probeFn) effects() string {
	var out []string
	for i, f := range probeFns {
		if s&(1<<i) != 0 && f.without != "" {
			out = append(out, f.without)
		}
	}
	return strings.Join(out, "; ")
}

// privilegeError is an error matching ErrInsufficientPrivilege, and
// ErrBadConfig when config is set (a Config option the role cannot serve).
type privilegeError struct {
	msg    string
	config bool
}

func (e *privilegeError) Error() string { return e.msg }

func (e *privilegeError) Is(target error) bool {
	return target == ErrInsufficientPrivilege || e.config && target == ErrBadConfig
}

// deniedError is a probe's error when the role may not use a function the
// router needs: the host is not unreachable, it cannot be used.
func deniedError(user string, denied probeFn) error {
	names := denied.names()
	return &privilegeError{msg: fmt.Sprintf(
		"%v: role %q may not execute %s, which the router needs (GRANT EXECUTE ON FUNCTION %s TO %s)",
		ErrInsufficientPrivilege, user, names, names, quoteIdent(user))}
}

// syncStandbyError is the error of ExcludeSyncStandby for a role that
// cannot see sync_state.
func syncStandbyError(user string) error {
	return &privilegeError{config: true, msg: fmt.Sprintf(
		"%v: ExcludeSyncStandby (pgreplica_exclude_sync_standby) needs pg_stat_replication.sync_state, "+
			"which PostgreSQL shows only to roles with pg_read_all_stats: GRANT pg_monitor TO %s, or turn the option off",
		ErrInsufficientPrivilege, quoteIdent(user))}
}

// quoteIdent quotes a role name for a GRANT statement when it needs it.
func quoteIdent(s string) string {
	if s == "" {
		return "<role>"
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
		}
	}
	return s
}

// privilegeErr is what Connect and Ping return when the role lacks a
// privilege the driver needs, nil otherwise. Roles and grants are
// cluster-wide (physical replication copies the catalogs), so any host's
// answer speaks for all; the primary's is preferred.
func (c *Connector) privilegeErr(t *topology) error {
	var seen *nodeStatus
	for i := range t.nodes {
		v := &t.nodes[i]
		if !v.probed {
			continue
		}
		var pe *privilegeError
		if errors.As(v.status.err, &pe) {
			return pe
		}
		if v.status.healthy() && (seen == nil || i == t.primary) {
			seen = &v.status
		}
	}
	if c.cfg.ExcludeSyncStandby && seen != nil && seen.syncHidden() {
		return syncStandbyError(seen.user)
	}
	return nil
}

// syncHidden reports that the node cannot show its standbys' sync_state.
func (s *nodeStatus) syncHidden() bool { return s.statsHidden || s.denied&fnReplication != 0 }

// warnPrivileges logs, once per connector, what the role cannot see.
func (c *Connector) warnPrivileges(st *nodeStatus) {
	if st.statsHidden && c.warnedHidden.CompareAndSwap(false, true) {
		c.log.Warn("pgreplica: the connecting role cannot see replication state (GRANT pg_monitor to it)",
			"role", st.user,
			"hidden", "pg_stat_wal_receiver status, conninfo, received_tli; pg_stat_replication sync_state",
			"effects", "status shows "+StatusNeedsMonitor+"; a replica's timeline is the one of its last restartpoint, so after a failover it gets reads only once it has made one; ExcludeSyncStandby fails")
	}
	if opt := st.denied &^ requiredFns; opt != 0 && c.warnedDenied.CompareAndSwap(false, true) {
		c.log.Warn("pgreplica: the connecting role may not use functions the monitor reads; it does without them",
			"role", st.user, "denied", opt.names(), "effects", opt.effects())
	}
}
