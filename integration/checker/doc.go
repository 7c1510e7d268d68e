// Package checker is a consistency checker for pgreplica: it runs many
// concurrent sessions against a real primary and its streaming replicas
// while a fault injector varies replication lag, records every operation
// in a history, and verifies the history for read-your-writes and
// monotonic-read violations.
//
// Each session owns a few rows of a table kv(session, key, version). It
// bumps the version of one of its rows and reads it back at once, reads
// the row another session is busy writing (three times in a row), reads
// that row again a round later, and reads one of its own rows again. When
// the primary served one of its reads of another session's row (a
// fallback), it re-reads that row at once and in the next rounds, as a
// user refreshing a page would. Every read also returns
// inet_server_port() and pg_last_wal_replay_lsn(), so the history says
// which node served it and how far that node had replayed; with
// pgreplica, each operation also records the Session's watermark before
// and after. Meanwhile the injector changes each replica's
// recovery_min_apply_delay (0–500 ms) and pauses replay on one replica at
// a time for a few hundred milliseconds; with Faults.KillRestart (on in
// the package's test and the command) it also kills a replica with
// SIGKILL every few seconds and starts it again so that it comes back
// behind what it served, while sessions that read there before the kill
// sit idle and come back to it (see kill.go and parking.go). Reads that
// fail because the replica was down are tolerated and counted apart
// (Report.KillErrors); no failed operation is a violation.
//
// Check finds read-your-writes violations (a session reads its own row
// and sees a version older than its last completed write) and
// monotonic-read violations (a session sees a row go back to an older
// version), on its own rows and on other sessions' rows. CheckWatermarks
// finds writes made with a pgreplica Session that did not raise its
// watermark. Violation.Explain names the step of pgreplica's protocol that
// let a violation through.
//
// The same workload runs through different Targets: pgreplica with a
// Session per workload session, pgreplica relying on the process default
// for reads of a session's own rows, and a naive router that writes to the
// primary and reads from the replicas in turn with no position tokens. The
// first two must show no violation; the naive router shows that the checker
// does detect them.
//
// Deploy puts real PgBouncer and HAProxy processes between the targets
// and the cluster in one of several deployment Shapes (PgBouncer per node
// in session or transaction mode, an HAProxy reader endpoint over the
// replicas, PgBouncer in front of that endpoint); with
// Faults.RestartProxies the proxies restart during the run. RunMatrix and
// WriteMatrix run every target through every shape (TestShapes, off by
// default: set PGREPLICA_SHAPES=1).
//
// The checker runs in CI as this package's test (a short run per target)
// and on demand as the program in cmd/pgreplica-check.
package checker
