package pgreplica

import (
	"context"
)

// A read's replay check: the statement that proves the read's replica has
// replayed the read's position, on the server that answers it. The check
// goes before the read (checkReplay), inside a read-only transaction of
// its own on a node behind a pooler, or in the read's own flight
// (runInFlight).

// Behind a transaction pooler (PgBouncer in transaction mode) every
// transaction may run on another backend, and in front of an endpoint on
// another server: a replay check and the read after it, sent as two
// statements, are two transactions and can land on two servers. So on a
// pooled node a read that needs a position is proven inside its own
// transaction: the lease begins a read-only transaction with the check
// (one round trip with pgx, two with lib/pq), the read runs in it, and
// the transaction ends when the lease is given back (one more round
// trip). The pgx-native handle sends its check in the read's own flight
// instead, where it can (pgxdoor.go).
//
// A transaction of the caller cannot be wrapped so: its BEGIN would start
// nothing (its isolation level would be lost), and under REPEATABLE READ
// a check inside it would fix the snapshot before the position is proven.
// It does not go to a pooled replica when it needs a position.

// checkReplay reads the replay position of p's server for a read that
// needs one, in a transaction of its own on a pooled node (inTx).
func checkReplay(ctx context.Context, p *physical) (replay LSN, inTx bool, err error) {
	if !p.node.pooled.Load() {
		replay, err = queryLSN(ctx, p.conn, replaySQL)
		return replay, false, err
	}
	replay, err = p.wire.beginChecked(ctx, p.conn)
	if err != nil {
		return 0, false, err
	}
	return replay, true, nil
}

// Reads with their replay check in their own flight, for both front
// doors (runInFlight): a read whose replica is not known to have its
// position sends the check and the query as one pipeline under one Sync
// when the inner driver is pgx (the pgx-native handle's operations do
// this themselves; a database/sql query does it through
// internal/pgxflight, flyQuery), at the round trip it costs pgx's
// stdlib, on the very server that answers. When the replica turns out
// behind, its rows are dropped unseen and the read goes where the plan
// says. lib/pq cannot pipeline, nor can simple_protocol: those reads
// check first.
