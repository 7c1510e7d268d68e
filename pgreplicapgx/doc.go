// Package pgreplicapgx is pgreplica for code that talks to pgx directly:
// a handle with the shape of *pgxpool.Pool (Exec, Query, QueryRow,
// SendBatch, CopyFrom, Begin, BeginTx, Acquire, Ping, Close, Stat) that
// routes each call between the primary and the streaming replicas with
// the same routing core, context requirements, Session, tokens, fallback
// policies, monitor and metrics as the database/sql driver.
//
// A program written for pgxpool switches by changing its constructor:
//
//	pool, err := pgxpool.New(ctx, "postgres://app@db1/shop")
//	pool, err := pgreplicapgx.New(ctx, "postgres://app@db1,db2,db3/shop")
//
// sqlc's generated code (sql_package: pgx/v5) takes the handle as its
// DBTX, and so do libraries that accept the small Exec/Query/QueryRow
// interfaces.
//
// Routing: Query and QueryRow of a provable read go to a replica that
// satisfies the context's requirement; every other statement, Exec,
// CopyFrom, a batch with any write and every transaction except a
// read-only one below SERIALIZABLE go to the primary. A batch of reads
// goes to one replica; BeginTx with AccessMode pgx.ReadOnly to one
// replica for the whole transaction. A write's commit position is
// recorded without a statement on the caller's path (it is read later,
// shared between writes), as in the driver.
//
// Errors are pgx's: *pgconn.PgError unchanged, pgx.ErrNoRows from
// QueryRow(...).Scan, pgx.ErrTxClosed; pgreplica's own errors
// (ErrNoPrimary, ErrNoFreshReplica, ErrWriteOutcomeUnknown, ...) as in
// the driver.
package pgreplicapgx
