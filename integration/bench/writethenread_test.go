package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/pgreplica/pgreplica"
)

// BenchmarkWriteThenRead writes a row (an autocommit INSERT through Exec)
// and reads it back at once (QueryRow by its id): the pattern of a request
// that saves something and shows it. Plain pgx does both on the primary;
// pgreplica must make the read see the write, and a replica cannot have
// replayed a write that is microseconds old, so the driver either waits
// for one or reads from the primary. Two requirements:
//
//   - Process: the default "process" consistency (context.Background());
//   - Session: pgreplica.WithSession with a Session of its own.
//
// It runs like BenchmarkPaired (one pair of operations per iteration,
// alternating order, ratio = median over blocks of pgreplica's time over
// direct's) and also reports where pgreplica's reads ran and how long they
// waited (readPlacement), warm-up included. Every read must return the
// row just written: the benchmark fails on a read-your-writes violation.
func BenchmarkWriteThenRead(b *testing.B) {
	for _, w := range []workload{writeThenReadProcess, writeThenReadSession} {
		b.Run(w.name, func(b *testing.B) {
			for _, drv := range drivers {
				b.Run("drv="+drv, func(b *testing.B) {
					createTable(b, "bench")
					e := newEnv(b, drv, clusterEndpoints(), "bench")
					before := placementOf(b, e.writer)
					benchPair(b, e, w)
					placementOf(b, e.writer).report(b, before)
				})
			}
		})
	}
}

var (
	writeThenReadProcess = workload{
		name: "Process", run: writeThenRead, direct: onPrimary, routed: onWriter,
	}
	writeThenReadSession = workload{
		name: "Session", run: writeThenRead, direct: onPrimary,
		routed: func(ctx context.Context, e *env) (context.Context, *sql.DB) {
			return pgreplica.WithSession(ctx, pgreplica.NewSession()), e.writer
		},
	}
)

// writtenIDs hands out the ids of the rows writeThenRead writes, far above
// the seeded ones and those the table's identity gives, never twice in a
// process.
var writtenIDs atomic.Int64

const writtenIDBase = 1 << 40

// writeThenRead inserts a row with a new id and reads it back at once.
func writeThenRead(ctx context.Context, e *env, db *sql.DB, _ int) error {
	r, err := writeRow(ctx, e, db)
	if err != nil {
		return err
	}
	return r.readBack(ctx, e, db)
}

// writtenRow is a row writeRow wrote: its id and its value.
type writtenRow struct {
	id    int64
	value string
}

// writeRow inserts a row with a new id through db.
func writeRow(ctx context.Context, e *env, db *sql.DB) (writtenRow, error) {
	id := writtenIDBase + writtenIDs.Add(1)
	r := writtenRow{id: id, value: "w" + strconv.FormatInt(id, 10)}
	_, err := db.ExecContext(ctx, e.insertIDSQL, r.id, r.value)
	return r, err
}

// readBack reads r through db and fails unless it is there as written.
func (r writtenRow) readBack(ctx context.Context, e *env, db *sql.DB) error {
	var got string
	switch err := db.QueryRowContext(ctx, e.selectSQL, r.id).Scan(&got); {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("row %d, written just before, not found: read-your-writes violated", r.id)
	case err != nil:
		return err
	case got != r.value:
		return fmt.Errorf("row %d reads %q, want %q", r.id, got, r.value)
	}
	return nil
}
