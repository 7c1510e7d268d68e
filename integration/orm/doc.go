// Package orm runs the common Go ORMs and query libraries — database/sql,
// sqlx, GORM, bun and ent — through pgreplica against a real primary and two
// streaming replicas started by the integration harness. It has no API: its
// tests prove, library by library, read-your-writes while replay is paused
// on every replica and read offload to the replicas once they are live, and
// its examples are the wiring that docs/orm.md explains.
//
// It is a module of its own so that the core module's dependency set stays
// small.
package orm
