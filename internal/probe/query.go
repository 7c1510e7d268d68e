package probe

// Query asks everything the router needs of a host in one round trip; its
// answer has Columns values, read by Parse. The CASE guards keep
// primary-only functions off replicas and vice versa. What the role may
// not use (denied) is left out, with a fallback where the router can do
// without it (see Fn).
//
// A light probe leaves out what changes rarely and costs the most: the
// system identifier (pg_control_system() reads the control file) and the
// primary's standbys (pg_stat_replication reads every backend's status:
// 0.09 ms with 5 backends, 0.27 ms with 85, where the light probe takes
// 0.08 ms either way). Its answer has NULL and an empty string in their
// place: the caller keeps them from the last full probe.
func Query(denied Fn, light bool) string {
	or := func(f Fn, expr, fallback string) string {
		if denied&f != 0 {
			return fallback
		}
		return expr
	}
	sysid := "(SELECT system_identifier FROM pg_control_system())::text"
	if light {
		sysid = "NULL::text"
		denied |= FnReplication
	}
	setting := func(name, fallback string) string {
		return or(FnSetting, "current_setting('"+name+"')", "'"+fallback+"'")
	}
	checkpointTL := or(FnControlCheckpoint, "(SELECT timeline_id FROM pg_control_checkpoint())", "NULL::int")
	return `SELECT pg_is_in_recovery(),
 (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_flush_lsn() END)::text,
 ` + or(FnReceiveLSN, "COALESCE(pg_last_wal_receive_lsn()::text, '')", "''") + `,
 CASE WHEN pg_is_in_recovery() THEN ` + or(FnReplayPaused, "pg_is_wal_replay_paused()", "false") + ` ELSE false END,
 CASE WHEN pg_is_in_recovery()
   THEN COALESCE(` + or(FnWalReceiver, "(SELECT received_tli FROM pg_stat_wal_receiver)", "NULL::int") + `, ` + checkpointTL + `)
   ELSE ` + or(FnWalfileName, "('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int", checkpointTL) + ` END,
 ` + sysid + `,
 ` + setting("synchronous_commit", "on") + ` = 'off',
 CASE WHEN pg_is_in_recovery()
   THEN ` + or(FnWalReceiver, "COALESCE((SELECT COALESCE(status, '') || ' ' || COALESCE(substring(conninfo from 'application_name=([^ ]+)'), '') FROM pg_stat_wal_receiver), '')", "''") + `
   ELSE ` + or(FnReplication, "COALESCE((SELECT string_agg(application_name || '=' || sync_state, ',') FROM pg_stat_replication), '')", "''") + ` END,
 CASE WHEN pg_is_in_recovery() THEN ` + setting("recovery_min_apply_delay", "0") + ` ELSE '' END,
 ` + or(FnHasRole, "pg_has_role(current_user, 'pg_read_all_stats', 'USAGE')", "false") + `,
 coalesce(host(inet_server_addr()), ''), coalesce(inet_server_port(), 0),
 (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint, pg_backend_pid()`
}

// FullSQL and LightSQL are the probes of a role that may use everything.
var (
	FullSQL  = Query(0, false)
	LightSQL = Query(0, true)
)

// Columns is how many values Query answers.
const Columns = 14
