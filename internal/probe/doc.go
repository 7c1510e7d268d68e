// Package probe is what pgreplica asks PostgreSQL about a host, and how
// the answers read: the probe that tells a node's role, positions and
// replication state (Query, Parse), the check of which monitoring
// functions the role may execute (PrivilegeSQL, ReadPrivileges), the
// identity of the server a connection reached (IdentitySQL,
// ParseIdentity), the check that the primary shows what a session's
// replica read saw (PrimaryHiddenSQL, ReplicaShowsSQL), and the values
// they answer with (pg_lsn text, which AppendLSN also writes; integers;
// settings), with where a position read from the primary can be reached
// in the WAL (ReachableLSN). It runs no statement and needs no router:
// the router sends the SQL on its own connections and copies the plain
// values read here into what it keeps of a node. Its tests, and the fuzz
// tests of what it reads from a server, run with
// `go test ./internal/probe/`.
package probe
