package probe

import (
	"database/sql/driver"
	"strings"
)

// PostgreSQL lets every role (PUBLIC) execute each function the probe
// calls, but a platform may revoke some: the router checks them when it
// connects, does without those it can and fails loudly for the others.

// Fn is one function or view the probe uses, as a bit of a set.
type Fn uint16

const (
	FnInRecovery        Fn = 1 << iota // pg_is_in_recovery()
	FnCurrentLSN                       // pg_current_wal_lsn()
	FnFlushLSN                         // pg_current_wal_flush_lsn()
	FnInsertLSN                        // pg_current_wal_insert_lsn()
	FnReplayLSN                        // pg_last_wal_replay_lsn()
	FnControlSystem                    // pg_control_system()
	FnReceiveLSN                       // pg_last_wal_receive_lsn()
	FnReplayPaused                     // pg_is_wal_replay_paused()
	FnControlCheckpoint                // pg_control_checkpoint()
	FnWalfileName                      // pg_walfile_name(pg_lsn)
	FnWalReceiver                      // the pg_stat_wal_receiver view
	FnReplication                      // the pg_stat_replication view
	FnHasRole                          // pg_has_role(name, name, text)
	FnSetting                          // current_setting(text)
)

// RequiredFns are those the router cannot do without: roles, positions
// and the cluster's identity (which keys sessions and tokens).
const RequiredFns = FnInRecovery | FnCurrentLSN | FnFlushLSN | FnInsertLSN | FnReplayLSN | FnControlSystem

// fns describes each Fn in bit order: its name, the SQL that is true when
// the role may use it, and what the router does without it.
var fns = [...]struct {
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

// NumFns is how many Fns there are; PrivilegeColumns how many values
// PrivilegeSQL answers.
const (
	NumFns           = len(fns)
	PrivilegeColumns = NumFns + 1
)

// PrivilegeSQL answers, for each Fn in bit order, whether the role is
// denied it (NULL, taken as allowed, for one the server does not have),
// then current_user.
var PrivilegeSQL = func() string {
	cols := make([]string, len(fns))
	for i, f := range fns {
		cols[i] = "NOT (" + f.allowed + ")"
	}
	return "SELECT " + strings.Join(cols, ",\n ") + ",\n current_user"
}()

// ReadPrivileges reads PrivilegeSQL's answer: the Fns the role may not
// use, and the role's name.
func ReadPrivileges(vals []driver.Value) (denied Fn, user string) {
	for i := range fns {
		if b, _ := vals[i].(bool); b {
			denied |= 1 << i
		}
	}
	return denied, Text(vals[NumFns])
}

// Names lists the functions and views of s.
func (s Fn) Names() string {
	var out []string
	for i, f := range fns {
		if s&(1<<i) != 0 {
			out = append(out, f.name)
		}
	}
	return strings.Join(out, ", ")
}

// Effects says what the router does without the optional members of s.
func (s Fn) Effects() string {
	var out []string
	for i, f := range fns {
		if s&(1<<i) != 0 && f.without != "" {
			out = append(out, f.without)
		}
	}
	return strings.Join(out, "; ")
}

// QuoteIdent quotes a role name for a GRANT statement when it needs it.
func QuoteIdent(s string) string {
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
