// Package patroni runs a PostgreSQL cluster managed by Patroni for tests,
// the way users who run PostgreSQL themselves deploy it: one etcd, a
// PostgreSQL server per member, each under a Patroni daemon with its REST
// API, and HAProxy in front of them with Patroni's health checks (a writer
// port checked with GET /primary, a reader port with GET /replica and one
// with GET /replica?lag=…). Everything runs as real processes on free
// ports of 127.0.0.1, in a temporary directory that Close removes with
// every process; a watchdog does the same if the test binary dies without
// calling Close. When the tests run as root, Patroni and PostgreSQL run as
// the OS user postgres (PostgreSQL refuses root); etcd and HAProxy run as
// the current user.
//
// It needs Patroni 3.x (Debian: apt-get install patroni), etcd 3.4 or
// later (apt-get install etcd-server) and the PostgreSQL server binaries
// with pg_basebackup and pg_rewind (apt-get install postgresql-15), and
// haproxy unless Options.NoHAProxy. New skips a test when one of them is
// missing, or fails it under PGREPLICA_INTEGRATION=require.
//
//	c := patroni.New(t, patroni.Options{SynchronousMode: true})
//	db, _ := sql.Open("pgreplica", c.DSN()) // every member's address
//	from, to, err := c.Switchover(ctx, -1)  // Patroni's REST POST /switchover
//	killed, err := c.Failover(ctx)          // kill -9 the leader's server
//	frozen, leader, err := c.FreezeLeader(ctx) // SIGSTOP past the TTL, then SIGCONT
//	st, err := c.WaitHealthy(ctx, 2)        // a leader and two streaming replicas
//
// Failover and freeze timings follow the Options: a TTL of 10 s, a loop
// of 1 s and primary_start_timeout 0 (Patroni fails over at once when the
// leader's PostgreSQL crashes, instead of restarting it in place).
//
// The distributed configuration store is etcd through its v2 API by
// default (Patroni's "etcd" client), because Patroni 3.0.2's "etcd3"
// client writes the leader key unconditionally when a leader that was
// frozen past its TTL wakes up, taking the leader key back from the member
// promoted meanwhile (fixed in Patroni 3.0.3); Options.DCS = "etcd3" picks
// that client.
//
// WatchRoles follows which member is the primary, and on which timeline,
// by asking every server itself every few milliseconds: a test can tell
// when the manager's promotion happened and whether two servers accepted
// writes at once.
package patroni
