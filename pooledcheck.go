package pgreplica

import (
	"context"
	"database/sql/driver"
	"time"

	"github.com/pgreplica/pgreplica/internal/sqlstate"
)

// Behind a transaction pooler (PgBouncer in transaction mode) every
// transaction may run on another backend, and in front of an endpoint on
// another server: a replay check and the read after it, sent as two
// statements, are two transactions and can land on two servers. So on a
// pooled node a read that needs a position is proven inside its own
// transaction: the lease begins a read-only transaction with the check
// (one round trip with pgx, two with lib/pq), the read runs in it, and
// the transaction ends when the lease is given back (one more round
// trip). The pgx-native handle sends its check in the read's own flight
// instead, where it can (pgxroute.go).
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
	replay, err = p.wire.beginChecked(ctx, p)
	if err != nil {
		return 0, false, err
	}
	return replay, true, nil
}

// endCheckTx ends the transaction of a lease whose check began one, once
// its read is done, before the connection goes back; *err becomes an
// error that closes the connection when that fails.
func (l *lease) endCheckTx(err *error) {
	if !l.inTx {
		return
	}
	l.inTx = false
	if *err == nil || !sqlstate.ServerGone(*err) {
		if e := endCheckTx(l.p, l.c.cfg.ProbeTimeout); e != nil {
			*err = e
		}
	}
}

// endCheckTx ends the transaction a pooled check began on p (timeout at
// most: the caller is done with the read). An error closes the
// connection rather than lend it inside a transaction.
func endCheckTx(p *physical, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, err := execInner(ctx, p.conn, "ROLLBACK", nil)
	if err != nil {
		return driver.ErrBadConn
	}
	return nil
}
