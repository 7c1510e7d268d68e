package stmtclass

import (
	"strings"
	"testing"
)

// classifyCase lists everything Classify reports; a field left out is
// expected to be false (or HintNone).
type classifyCase struct {
	name    string
	sql     string
	read    bool
	session bool
	async   bool
	multi   bool
	dml     bool
	hint    Hint
}

var classifyCases = []classifyCase{
	// Plain reads.
	{name: "select literal", sql: "SELECT 1", read: true},
	{name: "select lower case", sql: "select * from t where id = $1", read: true},
	{name: "select mixed case", sql: "SeLeCt a FrOm t", read: true},
	{name: "values", sql: "VALUES (1, 'a'), (2, 'b')", read: true},
	{name: "table", sql: "TABLE users", read: true},
	{name: "show", sql: "SHOW search_path", read: true},
	{name: "show all", sql: "show all", read: true},
	{name: "leading whitespace", sql: " \t\r\n\f\vSELECT 1", read: true},
	{name: "leading line comment", sql: "-- fetch users\nSELECT * FROM users", read: true},
	{name: "leading block comment", sql: "/* fetch */ SELECT 1", read: true},
	{name: "nested block comment", sql: "/* a /* b */ DELETE FROM t */ SELECT 1", read: true},
	{name: "comment with CR", sql: "-- x\rSELECT 1", read: true},
	{name: "comment touching keyword", sql: "/**/SELECT/**/1", read: true},
	{name: "parenthesised union", sql: "(SELECT 1) UNION (SELECT 2)", read: true},
	{name: "double parentheses", sql: "((SELECT a FROM t))", read: true},
	{name: "parenthesised values", sql: "(VALUES (1))", read: true},
	{name: "trailing semicolon", sql: "SELECT 1;", read: true},
	{name: "trailing semicolon and comment", sql: "SELECT 1; -- done\n /* bye */ ", read: true},
	{name: "empty statements around", sql: ";; SELECT 1 ;;", read: true},
	{name: "subquery", sql: "SELECT * FROM (SELECT id FROM t) s WHERE s.id IN (SELECT 1)", read: true},
	{name: "user function is read", sql: "SELECT my_func(1), count(*), lower(name) FROM t", read: true},
	{name: "pg_sleep is read", sql: "SELECT pg_sleep(0.1)", read: true},
	{name: "replay lsn is read", sql: "SELECT pg_last_wal_replay_lsn(), pg_is_in_recovery()", read: true},
	{name: "txid snapshot is read", sql: "SELECT txid_current_snapshot()", read: true},
	{name: "current_setting is read", sql: "SELECT current_setting('synchronous_commit')", read: true},
	{name: "for read only", sql: "SELECT * FROM t FOR READ ONLY", read: true},
	{name: "substring for", sql: "SELECT substring(name FROM 1 FOR 3) FROM t", read: true},
	{name: "numbers", sql: "SELECT 1.5, .5, 1e10, 1.5E-3, 0x1F, 1_000", read: true},
	{name: "identifier with dollar", sql: "SELECT a$b, c$$ FROM t", read: true},
	{name: "unicode identifier", sql: "SELECT été FROM données", read: true},
	{name: "update_at column", sql: "SELECT updated_at, deleted, inserted FROM t ORDER BY updated_at", read: true},
	{name: "cast", sql: "SELECT $1::int, '2024-01-01'::date", read: true},
	{name: "window", sql: "SELECT row_number() OVER (PARTITION BY a ORDER BY b) FROM t", read: true},
	{name: "lateral", sql: "SELECT * FROM t, LATERAL (SELECT * FROM u WHERE u.t = t.id LIMIT 1) x", read: true},
	{name: "operators", sql: "SELECT a->>'k', b @> '{}', c || d, e <-> f FROM t", read: true},
	{name: "operator before comment", sql: "SELECT 2*--x\n3", read: true},
	{name: "array slice", sql: "SELECT a[1:2] FROM t", read: true},

	// WITH.
	{name: "with select", sql: "WITH x AS (SELECT 1) SELECT * FROM x", read: true},
	{name: "with recursive", sql: "WITH RECURSIVE t(n) AS (VALUES (1) UNION ALL SELECT n+1 FROM t WHERE n < 100) SELECT sum(n) FROM t", read: true},
	{name: "with materialized", sql: "WITH x AS MATERIALIZED (SELECT * FROM t) SELECT * FROM x", read: true},
	{name: "with delete cte", sql: "WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d", dml: true},
	{name: "with insert cte", sql: "WITH i AS (INSERT INTO log VALUES (1) RETURNING id) SELECT id FROM i", dml: true},
	{name: "with update cte", sql: "with u as (update t set a = 1 returning *) select count(*) from u", dml: true},
	{name: "with merge cte", sql: "WITH m AS (MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN DELETE RETURNING *) SELECT 1", dml: true},
	{name: "with then insert", sql: "WITH x AS (SELECT 1 AS a) INSERT INTO t SELECT a FROM x", dml: true},
	{name: "with then update", sql: "WITH x AS (SELECT 1) UPDATE t SET a = 1", dml: true},
	{name: "nested modifying cte", sql: "WITH a AS (SELECT * FROM (WITH b AS (DELETE FROM t RETURNING 1) SELECT * FROM b) q) SELECT * FROM a", dml: true},
	{name: "with insert into table named temp", sql: "WITH x AS (INSERT INTO temp VALUES (1) RETURNING *) SELECT * FROM x", dml: true},
	{name: "with select for update", sql: "WITH x AS (SELECT * FROM t FOR UPDATE) SELECT * FROM x"},

	// Locking and SELECT INTO.
	{name: "for update", sql: "SELECT * FROM t WHERE id = $1 FOR UPDATE"},
	{name: "for update skip locked", sql: "SELECT id FROM jobs ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED"},
	{name: "for no key update", sql: "SELECT * FROM t FOR NO KEY UPDATE"},
	{name: "for share", sql: "SELECT * FROM t FOR SHARE"},
	{name: "for key share", sql: "select * from t for key share of t nowait"},
	{name: "table for update", sql: "TABLE t FOR UPDATE"},
	{name: "parenthesised for update", sql: "(SELECT * FROM t) FOR UPDATE"},
	{name: "select into", sql: "SELECT * INTO new_t FROM t"},
	{name: "select into temp", sql: "SELECT * INTO TEMP tmp FROM t", session: true},
	{name: "select into temporary", sql: "SELECT * INTO TEMPORARY TABLE tmp FROM t", session: true},
	{name: "select into local temp", sql: "select 1 into local temp tmp", session: true},
	{name: "select into pg_temp", sql: "SELECT 1 INTO pg_temp.tmp", session: true},
	{name: "read from pg_temp", sql: "SELECT * FROM pg_temp.tmp"},
	{name: "number then into", sql: "SELECT 1into t"},

	// Volatile, side-effect and primary-only functions.
	{name: "nextval", sql: "SELECT nextval('users_id_seq')"},
	{name: "nextval upper", sql: "SELECT NEXTVAL('s')"},
	{name: "nextval qualified", sql: "SELECT pg_catalog.nextval('s')"},
	{name: "nextval quoted", sql: `SELECT "pg_catalog"."nextval"('s')`},
	{name: "nextval spaced", sql: "SELECT nextval /* why */ ('s')"},
	{name: "nextval in from", sql: "SELECT * FROM nextval('s')"},
	{name: "nextval in values", sql: "VALUES (nextval('s'))"},
	{name: "setval", sql: "SELECT setval('s', 42)"},
	{name: "currval", sql: "SELECT currval('s')"},
	{name: "lastval", sql: "SELECT lastval()"},
	{name: "advisory lock", sql: "SELECT pg_advisory_lock(42)", session: true},
	{name: "try advisory lock", sql: "SELECT pg_try_advisory_lock(1, 2)", session: true},
	{name: "advisory lock shared", sql: "SELECT pg_advisory_lock_shared($1)", session: true},
	{name: "advisory unlock", sql: "SELECT pg_advisory_unlock(42)", session: true},
	{name: "advisory unlock all", sql: "SELECT pg_advisory_unlock_all()", session: true},
	{name: "advisory xact lock", sql: "SELECT pg_advisory_xact_lock(42)"},
	{name: "try advisory xact lock shared", sql: "SELECT PG_TRY_ADVISORY_XACT_LOCK_SHARED(1)"},
	{name: "pg_notify", sql: "SELECT pg_notify('ch', 'payload')"},
	{name: "txid_current", sql: "SELECT txid_current()"},
	{name: "txid_current_if_assigned", sql: "SELECT txid_current_if_assigned()"},
	{name: "pg_current_xact_id", sql: "SELECT pg_current_xact_id()"},
	{name: "pg_current_xact_id_if_assigned", sql: "SELECT pg_current_xact_id_if_assigned()"},
	{name: "pg_current_wal_lsn", sql: "SELECT pg_current_wal_lsn()"},
	{name: "pg_current_wal_flush_lsn", sql: "SELECT pg_current_wal_flush_lsn()"},
	{name: "pg_switch_wal", sql: "SELECT pg_switch_wal()"},
	{name: "pg_create_restore_point", sql: "SELECT pg_create_restore_point('x')"},
	{name: "create replication slot", sql: "SELECT pg_create_logical_replication_slot('s', 'pgoutput')"},
	{name: "drop replication slot", sql: "SELECT pg_drop_replication_slot('s')"},
	{name: "logical slot get changes", sql: "SELECT * FROM pg_logical_slot_get_changes('s', NULL, NULL)"},
	{name: "replication slots view is read", sql: "SELECT * FROM pg_replication_slots", read: true},
	{name: "logical emit message", sql: "SELECT pg_logical_emit_message(true, 'p', 'x')"},
	{name: "terminate backend", sql: "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'x'"},
	{name: "cancel backend", sql: "SELECT pg_cancel_backend(123)"},
	{name: "reload conf", sql: "SELECT pg_reload_conf()"},
	{name: "rotate logfile", sql: "SELECT pg_rotate_logfile()"},
	{name: "stat reset", sql: "SELECT pg_stat_reset()"},
	{name: "stat reset single table", sql: "SELECT pg_stat_reset_single_table_counters('t'::regclass)"},
	{name: "lo_import", sql: "SELECT lo_import('/tmp/x')"},
	{name: "lo_get", sql: "SELECT lo_get(16400)"},
	{name: "loread", sql: "SELECT loread(0, 100)"},
	{name: "dblink_exec", sql: "SELECT dblink_exec('dbname=x', 'DELETE FROM t')"},
	{name: "dblink_connect", sql: "SELECT dblink_connect('c', 'dbname=x')", session: true},
	{name: "pg_promote", sql: "SELECT pg_promote()"},
	{name: "setseed", sql: "SELECT setseed(0.5)", session: true},
	{name: "volatile in where", sql: "SELECT * FROM t WHERE id = currval('s')"},
	{name: "function name as string", sql: "SELECT 'nextval(1)', \"nextval\" FROM t", read: true},
	{name: "function name as column", sql: "SELECT nextval FROM t", read: true},

	// set_config.
	{name: "set_config session", sql: "SELECT set_config('search_path', 'app', false)", session: true},
	{name: "set_config qualified", sql: "SELECT pg_catalog.set_config('search_path', '', false)", session: true},
	{name: "set_config local", sql: "SELECT set_config('search_path', 'app', true)"},
	{name: "set_config local string", sql: "SELECT set_config('app.user', $1, 'true')"},
	{name: "set_config param local", sql: "SELECT set_config('app.user', $1, $2)", session: true},
	{name: "set_config synchronous_commit", sql: "SELECT set_config('synchronous_commit', 'off', false)", session: true, async: true},
	{name: "set_config synchronous_commit local", sql: "select SET_CONFIG('Synchronous_Commit', 'off', true)", async: true},
	{name: "set_config unknown name", sql: "SELECT set_config($1, $2, true)", async: true},
	{name: "set_config computed name", sql: "SELECT set_config('synchronous' || '_commit', 'off', true)", async: true},
	{name: "set_config nested call args", sql: "SELECT set_config('app.x', lower($1), true), 1", session: false},
	{name: "set_config unclosed", sql: "SELECT set_config('a', 'b', true", session: true, async: true},

	// Writes.
	{name: "insert", sql: "INSERT INTO t (a) VALUES (1)", dml: true},
	{name: "insert returning", sql: "INSERT INTO t (a) VALUES ($1) RETURNING id", dml: true},
	{name: "insert select", sql: "INSERT INTO t SELECT * FROM u", dml: true},
	{name: "upsert", sql: "INSERT INTO t (id) VALUES (1) ON CONFLICT (id) DO UPDATE SET n = t.n + 1", dml: true},
	{name: "update", sql: "UPDATE t SET a = 1 WHERE id = $1", dml: true},
	{name: "update returning", sql: "update t set a = a + 1 returning a", dml: true},
	{name: "delete", sql: "DELETE FROM t WHERE id = 1", dml: true},
	{name: "merge", sql: "MERGE INTO t USING s ON t.id = s.id WHEN NOT MATCHED THEN INSERT VALUES (s.id)", dml: true},
	{name: "create table", sql: "CREATE TABLE t (id int)"},
	{name: "create table named temp", sql: "CREATE TABLE temp (id int)"},
	{name: "create unlogged table", sql: "CREATE UNLOGGED TABLE t (id int)"},
	{name: "create table as", sql: "CREATE TABLE t AS SELECT 1"},
	{name: "create function with pg_temp search_path", sql: "CREATE FUNCTION f() RETURNS int LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$ SELECT 1 $$"},
	{name: "alter table", sql: "ALTER TABLE t ADD COLUMN b int"},
	{name: "drop table", sql: "DROP TABLE t"},
	{name: "truncate", sql: "TRUNCATE t"},
	{name: "copy from", sql: "COPY t FROM STDIN"},
	{name: "copy to", sql: "COPY (SELECT 1) TO STDOUT"},
	{name: "call", sql: "CALL do_things(1)"},
	{name: "lock", sql: "LOCK TABLE t IN ACCESS EXCLUSIVE MODE"},
	{name: "vacuum", sql: "VACUUM ANALYZE t"},
	{name: "analyze", sql: "ANALYZE t"},
	{name: "refresh materialized view", sql: "REFRESH MATERIALIZED VIEW v"},
	{name: "grant", sql: "GRANT SELECT ON t TO r"},
	{name: "notify", sql: "NOTIFY ch, 'x'"},
	{name: "commit", sql: "COMMIT"},
	{name: "rollback", sql: "ROLLBACK"},
	{name: "savepoint", sql: "SAVEPOINT s1"},
	{name: "execute", sql: "EXECUTE stmt1(1)"},
	{name: "fetch", sql: "FETCH 10 FROM c"},
	{name: "unknown statement", sql: "FOO BAR"},
	{name: "starts with quoted identifier", sql: `"select" 1`},
	{name: "starts with string", sql: `'select'`},

	// EXPLAIN.
	{name: "explain select", sql: "EXPLAIN SELECT * FROM t", read: true},
	{name: "explain insert plans only", sql: "EXPLAIN INSERT INTO t VALUES (1)", read: true},
	{name: "explain verbose delete", sql: "EXPLAIN VERBOSE DELETE FROM t", read: true},
	{name: "explain options delete", sql: "EXPLAIN (FORMAT JSON, COSTS OFF) DELETE FROM t", read: true},
	{name: "explain nextval plans only", sql: "EXPLAIN SELECT nextval('s')", read: true},
	{name: "explain set_config not executed", sql: "EXPLAIN SELECT set_config('synchronous_commit', 'off', false)", read: true},
	{name: "explain analyze select", sql: "EXPLAIN ANALYZE SELECT * FROM t", read: true},
	{name: "explain analyse select", sql: "explain analyse verbose select 1", read: true},
	{name: "explain analyze delete", sql: "EXPLAIN ANALYZE DELETE FROM t"},
	{name: "explain analyze buffers delete", sql: "EXPLAIN (ANALYZE, BUFFERS) DELETE FROM t WHERE id = 1"},
	{name: "explain analyze false", sql: "EXPLAIN (ANALYZE false) DELETE FROM t"},
	{name: "explain quoted analyze", sql: `EXPLAIN ("analyze" on) UPDATE t SET a = 1`},
	{name: "explain analyze nextval", sql: "EXPLAIN (ANALYZE, FORMAT JSON) SELECT nextval('s')"},
	{name: "explain analyze advisory", sql: "EXPLAIN ANALYZE SELECT pg_advisory_lock(1)", session: true},
	{name: "explain analyze with delete", sql: "EXPLAIN ANALYZE WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d"},
	{name: "explain parenthesised select", sql: "EXPLAIN (SELECT 1)", read: true},
	{name: "explain analyze parenthesised", sql: "EXPLAIN ANALYZE (SELECT 1) UNION (SELECT 2)", read: true},
	{name: "explain execute", sql: "EXPLAIN EXECUTE s(1)"},
	{name: "explain alone", sql: "EXPLAIN"},
	{name: "explain options only", sql: "EXPLAIN (ANALYZE)"},
	{name: "explain options unclosed", sql: "EXPLAIN (COSTS OFF SELECT 1"},

	// Multi-statement.
	{name: "two selects", sql: "SELECT 1; SELECT 2", multi: true},
	{name: "select then delete", sql: "SELECT 1; DELETE FROM t", multi: true},
	{name: "set and select", sql: "SET search_path = x; SELECT 1", multi: true, session: true},
	{name: "select then listen", sql: "SELECT 1;LISTEN ch", multi: true, session: true},
	{name: "commit and lsn", sql: "COMMIT; SELECT pg_current_wal_flush_lsn()", multi: true},
	{name: "multi with async", sql: "SET LOCAL synchronous_commit = off; UPDATE t SET a = 1", multi: true, async: true},
	{name: "multi trailing semicolon", sql: "SELECT 1; SELECT 2;", multi: true},

	// Session state.
	{name: "set", sql: "SET search_path TO app, public", session: true},
	{name: "set session", sql: "SET SESSION statement_timeout = '5s'", session: true},
	{name: "set time zone", sql: "SET TIME ZONE 'UTC'", session: true},
	{name: "set role", sql: "SET ROLE app_reader", session: true},
	{name: "set session authorization", sql: "SET SESSION AUTHORIZATION bob", session: true},
	{name: "set session characteristics", sql: "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY", session: true},
	{name: "set local", sql: "SET LOCAL statement_timeout = 0"},
	{name: "set transaction", sql: "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE"},
	{name: "set constraints", sql: "SET CONSTRAINTS ALL DEFERRED"},
	{name: "reset", sql: "RESET search_path", session: true},
	{name: "reset all", sql: "RESET ALL", session: true, async: true},
	{name: "discard all", sql: "DISCARD ALL", session: true, async: true},
	{name: "discard plans", sql: "DISCARD PLANS", session: true},
	{name: "create temp table", sql: "CREATE TEMP TABLE x (id int)", session: true},
	{name: "create temporary table", sql: "create temporary table x as select 1", session: true},
	{name: "create local temp table", sql: "CREATE LOCAL TEMPORARY TABLE x (id int)", session: true},
	{name: "create global temp table", sql: "CREATE GLOBAL TEMP TABLE x (id int)", session: true},
	{name: "create temp view", sql: "CREATE OR REPLACE TEMP VIEW v AS SELECT 1", session: true},
	{name: "create temp sequence", sql: "CREATE TEMPORARY SEQUENCE s", session: true},
	{name: "create pg_temp table", sql: "CREATE TABLE pg_temp.x (id int)", session: true},
	{name: "create pg_temp function", sql: `CREATE FUNCTION "pg_temp".f() RETURNS int AS 'SELECT 1' LANGUAGE sql`, session: true},
	{name: "listen", sql: "LISTEN events", session: true},
	{name: "unlisten", sql: "UNLISTEN *", session: true},
	{name: "prepare", sql: "PREPARE q (int) AS SELECT $1", session: true},
	{name: "prepare named transaction", sql: "PREPARE transaction AS SELECT 1", session: true},
	{name: "prepare transaction", sql: "PREPARE TRANSACTION 'tx1'"},
	{name: "deallocate", sql: "DEALLOCATE ALL", session: true},
	{name: "declare with hold", sql: "DECLARE c CURSOR WITH HOLD FOR SELECT * FROM t", session: true},
	{name: "declare without hold", sql: "DECLARE c CURSOR WITHOUT HOLD FOR WITH x AS (SELECT 1) SELECT * FROM x"},
	{name: "declare plain", sql: "DECLARE c NO SCROLL CURSOR FOR SELECT 1"},
	{name: "do block", sql: "DO $$ BEGIN PERFORM 1; END $$", session: true},
	{name: "do block sync commit", sql: "DO $body$ BEGIN PERFORM set_config('synchronous_commit', 'off', false); END $body$", session: true, async: true},
	{name: "load", sql: "LOAD 'auto_explain'", session: true},
	{name: "begin", sql: "BEGIN", session: true},
	{name: "begin isolation", sql: "BEGIN ISOLATION LEVEL REPEATABLE READ", session: true},
	{name: "start transaction", sql: "START TRANSACTION READ ONLY", session: true},

	// synchronous_commit.
	{name: "set synchronous_commit", sql: "SET synchronous_commit = off", session: true, async: true},
	{name: "set synchronous_commit to", sql: "set Synchronous_Commit to 'local'", session: true, async: true},
	{name: "set session synchronous_commit", sql: "SET SESSION synchronous_commit TO off", session: true, async: true},
	{name: "set local synchronous_commit", sql: "SET LOCAL synchronous_commit TO OFF", async: true},
	{name: "set quoted synchronous_commit", sql: `SET "synchronous_commit" = off`, session: true, async: true},
	{name: "reset synchronous_commit", sql: "RESET synchronous_commit", session: true, async: true},
	{name: "alter role synchronous_commit", sql: "ALTER ROLE app SET synchronous_commit = off", async: true},
	{name: "alter system synchronous_commit", sql: "ALTER SYSTEM SET synchronous_commit = 'off'", async: true},
	{name: "synchronous_commit in a string", sql: "SELECT 'SET synchronous_commit = off'", read: true},

	// Strings, quoted identifiers and dollar quotes hide keywords.
	{name: "delete in string", sql: "SELECT 'DELETE FROM t'", read: true},
	{name: "doubled quote", sql: "SELECT 'it''s; DELETE FROM t'", read: true},
	{name: "escape string", sql: `SELECT E'it\'s; DELETE FROM t'`, read: true},
	{name: "escape string lower e", sql: `SELECT e'\\', 'x'`, read: true},
	{name: "escape string backslash end", sql: `SELECT E'\\'; DELETE FROM t`, multi: true},
	{name: "plain string backslash", sql: `SELECT '\'; DELETE FROM t; --'`, multi: true},
	{name: "identifier ending in e", sql: "SELECT name'x' FROM t", read: true},
	{name: "quoted update column", sql: `SELECT "update" FROM t`, read: true},
	{name: "quoted identifier with quote", sql: `SELECT "a""; DELETE" FROM t`, read: true},
	{name: "dollar quote", sql: "SELECT $$; DROP TABLE$$", read: true},
	{name: "tagged dollar quote", sql: "SELECT $fn$ $$ ; DELETE $$ $fn$", read: true},
	{name: "param is not dollar quote", sql: "SELECT $1; DROP TABLE t", multi: true},
	{name: "params around string", sql: "SELECT $1, '$2', $3", read: true},
	{name: "bit and hex strings", sql: "SELECT B'1010', X'1F', N'delete'", read: true},
	{name: "unicode string", sql: `SELECT U&'d\0061t\+000061'`, read: true},
	{name: "comment in string", sql: "SELECT '/* x', '-- y'", read: true},
	{name: "semicolon in comment", sql: "SELECT 1 /* ; DELETE FROM t */", read: true},
	{name: "line comment hides delete", sql: "SELECT 1 -- ; DELETE FROM t", read: true},
	{name: "for update in string", sql: "SELECT * FROM t WHERE note = 'FOR UPDATE'", read: true},

	// Malformed input.
	{name: "empty", sql: ""},
	{name: "only whitespace", sql: "  \n\t "},
	{name: "only comments", sql: "-- x\n/* y */"},
	{name: "only semicolons", sql: ";;"},
	{name: "unterminated string", sql: "SELECT 'abc"},
	{name: "unterminated escape string", sql: `SELECT E'abc\'`},
	{name: "unterminated quoted identifier", sql: `SELECT "abc`},
	{name: "unterminated dollar quote", sql: "SELECT $$abc"},
	{name: "unterminated tagged dollar quote", sql: "SELECT $a$abc$a"},
	{name: "unterminated comment", sql: "SELECT 1 /* abc"},
	{name: "unterminated nested comment", sql: "SELECT 1 /* a /* b */"},
	{name: "unbalanced open paren", sql: "SELECT (1"},
	{name: "unbalanced close paren", sql: "SELECT 1)"},
	{name: "lone dollar", sql: "SELECT $ 1", read: true},
	{name: "lone open paren", sql: "("},

	// Hints.
	{name: "hint primary", sql: "/* pgreplica:primary */ SELECT 1", read: true, hint: HintPrimary},
	{name: "hint replica", sql: "SELECT 1 /* pgreplica:replica */", read: true, hint: HintReplica},
	{name: "hint no spaces", sql: "/*pgreplica:replica*/SELECT 1", read: true, hint: HintReplica},
	{name: "hint spaced colon", sql: "/*  PgReplica : Primary  */ SELECT 1", read: true, hint: HintPrimary},
	{name: "hint line comment", sql: "SELECT 1 -- pgreplica:primary", read: true, hint: HintPrimary},
	{name: "hint on write", sql: "/* pgreplica:replica */ DELETE FROM t", hint: HintReplica, dml: true},
	{name: "hint among other text", sql: "/* app=web, pgreplica:primary */ SELECT 1", read: true, hint: HintPrimary},
	{name: "hint conflict primary wins", sql: "/* pgreplica:replica */ SELECT 1 /* pgreplica:primary */", read: true, hint: HintPrimary},
	{name: "hint in string ignored", sql: "SELECT '/* pgreplica:primary */'", read: true},
	{name: "hint in dollar quote ignored", sql: "SELECT $$/* pgreplica:primary */$$", read: true},
	{name: "hint unknown target", sql: "/* pgreplica:standby */ SELECT 1", read: true},
	{name: "hint longer word", sql: "/* pgreplica:primaryish */ SELECT 1", read: true},
	{name: "hint prefixed name", sql: "/* notpgreplica:primary */ SELECT 1", read: true},
	{name: "hint in multi", sql: "SELECT 1; /* pgreplica:primary */ SELECT 2", multi: true, hint: HintPrimary},

	// ORM-generated SQL.
	{name: "gorm create", sql: `INSERT INTO "users" ("name","email","created_at") VALUES ($1,$2,$3) RETURNING "id"`, dml: true},
	{name: "gorm first", sql: `SELECT * FROM "users" WHERE "users"."id" = $1 AND "users"."deleted_at" IS NULL ORDER BY "users"."id" LIMIT $2`, read: true},
	{name: "gorm soft delete", sql: `UPDATE "users" SET "deleted_at"=$1 WHERE "users"."id" = $2 AND "users"."deleted_at" IS NULL`, dml: true},
	{name: "gorm preload", sql: `SELECT * FROM "orders" WHERE "orders"."user_id" IN ($1,$2,$3) AND "orders"."deleted_at" IS NULL`, read: true},
	{name: "gorm upsert", sql: `INSERT INTO "users" ("id","name") VALUES ($1,$2) ON CONFLICT ("id") DO UPDATE SET "name"="excluded"."name" RETURNING "id"`, dml: true},
	{name: "gorm for update", sql: `SELECT * FROM "users" WHERE "users"."id" = $1 ORDER BY "users"."id" LIMIT $2 FOR UPDATE`},
	{name: "gorm count", sql: `SELECT count(*) FROM "users" WHERE "users"."deleted_at" IS NULL`, read: true},
	{name: "bun select", sql: `SELECT "u"."id", "u"."name" FROM "users" AS "u" WHERE ("u"."id" = 1)`, read: true},
	{name: "bun insert", sql: `INSERT INTO "users" AS "u" ("id", "name") VALUES (DEFAULT, 'x') RETURNING "u"."id"`, dml: true},
	{name: "bun delete", sql: `DELETE FROM "users" AS "u" WHERE ("u"."id" = 1)`, dml: true},
	{name: "bun relation join", sql: `SELECT "u"."id", "profile"."id" AS "profile__id" FROM "users" AS "u" LEFT JOIN "profiles" AS "profile" ON ("profile"."user_id" = "u"."id")`, read: true},
	{name: "ent query", sql: `SELECT DISTINCT "users"."id", "users"."age", "users"."name" FROM "users" WHERE "users"."age" > $1 ORDER BY "users"."id" LIMIT 10`, read: true},
	{name: "ent create", sql: `INSERT INTO "users" ("age", "name") VALUES ($1, $2) RETURNING "id"`, dml: true},
	{name: "ent exists", sql: `SELECT 1 FROM "users" WHERE "users"."id" = $1 LIMIT 1`, read: true},
	{name: "sqlc style", sql: "-- name: GetAuthor :one\nSELECT id, name, bio FROM authors\nWHERE id = $1 LIMIT 1", read: true},
	{name: "sqlc style insert", sql: "-- name: CreateAuthor :one\nINSERT INTO authors (name, bio) VALUES ($1, $2)\nRETURNING *", dml: true},
}

func TestClassify(t *testing.T) {
	if len(classifyCases) < 120 {
		t.Fatalf("only %d cases", len(classifyCases))
	}
	seen := map[string]bool{}
	for _, tc := range classifyCases {
		if seen[tc.name] {
			t.Errorf("duplicate case name %q", tc.name)
		}
		seen[tc.name] = true
		t.Run(tc.name, func(t *testing.T) {
			want := Class{Read: tc.read, Hint: tc.hint, SessionState: tc.session,
				AsyncCommit: tc.async, Multi: tc.multi, DML: tc.dml}
			got := Classify(tc.sql)
			got.NoWAL = false // checked by TestClassifyNoWAL
			if got != want {
				t.Errorf("Classify(%q)\n got %+v\nwant %+v", tc.sql, got, want)
			}
		})
	}
}

// TestClassifyNoWAL checks which statements need no LSN capture.
func TestClassifyNoWAL(t *testing.T) {
	for q, want := range map[string]bool{
		"SET search_path = app":                        true,
		"RESET ALL":                                    true,
		"LISTEN jobs":                                  true,
		"PREPARE p AS INSERT INTO t VALUES (1)":        true,
		"BEGIN":                                        true,
		"SET a = 1; SET b = 2":                         true,
		"SET a = 1; INSERT INTO t VALUES (1)":          false,
		"INSERT INTO t VALUES (1)":                     false,
		"DO $$ BEGIN INSERT INTO t VALUES (1); END $$": false,
		"CREATE TEMP TABLE x (a int)":                  false,
		"SELECT pg_advisory_lock(1)":                   false,
		"EXPLAIN ANALYZE SET a = 1":                    false,
		"":                                             false,
	} {
		if got := Classify(q).NoWAL; got != want {
			t.Errorf("Classify(%q).NoWAL = %v, want %v", q, got, want)
		}
	}
}

// TestClassifyIgnoresCommentsAndCase checks that every read stays a read,
// and every non-read stays one, when comments are spread between its tokens
// and its letters change case.
func TestClassifyIgnoresCommentsAndCase(t *testing.T) {
	for _, tc := range classifyCases {
		if tc.hint != HintNone || strings.ContainsAny(tc.sql, `'"$-/`) {
			continue // the rewrite below would change strings or comments
		}
		q := strings.ReplaceAll(tc.sql, " ", " /* c */ ")
		q = "/* lead */ " + flipCase(q) + "\n-- tail"
		got := Classify(q)
		if got.Read != tc.read || got.Multi != tc.multi || got.SessionState != tc.session || got.AsyncCommit != tc.async {
			t.Errorf("%s: Classify(%q) = %+v, want as for %q", tc.name, q, got, tc.sql)
		}
	}
}

func flipCase(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z':
			b[i] = c - 32
		case c >= 'A' && c <= 'Z':
			b[i] = c + 32
		}
	}
	return string(b)
}

// ormSelect is a 2 KB SELECT of the kind ORMs generate.
var ormSelect = func() string {
	var b strings.Builder
	b.WriteString(`SELECT "orders"."id", "orders"."created_at", "orders"."updated_at", "orders"."deleted_at"`)
	for i := 0; b.Len() < 1600; i++ {
		b.WriteString(`, "orders"."column_`)
		b.WriteByte(byte('a' + i%26))
		b.WriteString(`_name"`)
	}
	b.WriteString(` FROM "orders" LEFT JOIN "customers" AS "customer" ON "customer"."id" = "orders"."customer_id"` +
		` WHERE "orders"."tenant_id" = $1 AND "orders"."status" IN ($2,$3,$4) AND "orders"."deleted_at" IS NULL` +
		` AND "customer"."region" = $5 AND lower("customer"."email") LIKE $6` +
		` ORDER BY "orders"."created_at" DESC, "orders"."id" LIMIT $7 OFFSET $8`)
	return b.String()
}()

var benchStatements = []struct{ name, sql string }{
	{"short_select", "SELECT id, name FROM users WHERE id = $1"},
	{"orm_select_2KB", ormSelect},
	{"insert_returning", `INSERT INTO "users" ("name","email","created_at") VALUES ($1,$2,$3) RETURNING "id"`},
}

func TestClassifyBenchStatements(t *testing.T) {
	if n := len(ormSelect); n < 1900 || n > 2300 {
		t.Fatalf("ormSelect is %d bytes", n)
	}
	want := []bool{true, true, false}
	for i, s := range benchStatements {
		if got := Classify(s.sql).Read; got != want[i] {
			t.Errorf("%s: read = %v", s.name, got)
		}
	}
}

func TestClassifyAllocs(t *testing.T) {
	for _, s := range benchStatements {
		if n := testing.AllocsPerRun(100, func() { Classify(s.sql) }); n != 0 {
			t.Errorf("%s: %v allocs per run", s.name, n)
		}
	}
}

func BenchmarkClassify(b *testing.B) {
	for _, s := range benchStatements {
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(s.sql)))
			for b.Loop() {
				Classify(s.sql)
			}
		})
	}
}

func FuzzClassify(f *testing.F) {
	for _, tc := range classifyCases {
		f.Add(tc.sql)
	}
	f.Add(ormSelect)
	f.Fuzz(func(t *testing.T, q string) {
		c := Classify(q)
		if c.Multi && (c.Read || c.DML) {
			t.Fatalf("Classify(%q) = %+v: multi must not be read or dml", q, c)
		}
		if c.Read && c.DML {
			t.Fatalf("Classify(%q) = %+v: read and dml", q, c)
		}
		if c.Hint > HintReplica {
			t.Fatalf("Classify(%q): hint %d", q, c.Hint)
		}
		// Text after a line comment cannot make a statement a read.
		if !c.Read && !c.Multi {
			if d := Classify(q + "\n-- x"); d.Read {
				t.Fatalf("appending a comment to %q made it a read", q)
			}
		}
	})
}
