package pgreplica

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/DATA-DOG/go-sqlmock"
)

// TestReadOnlyTxFallbackTakesASlotAndCounts: a read-only transaction that
// falls back to the primary is a fallback read like any other: it holds
// one of the MaxPrimaryFallbacks slots for its whole life and is counted.
func TestReadOnlyTxFallbackTakesASlotAndCounts(t *testing.T) {
	mc := newMockCluster(t, 1, func(c *Config) { c.MaxPrimaryFallbacks = 1 })
	// A write the replica (known at 0/100) has not replayed.
	mc.mocks[0].ExpectExec("UPDATE t SET x = 1").WillReturnResult(sqlmock.NewResult(0, 1))
	mc.expectLSNCapture(0, "0/900")
	if _, err := mc.db.Exec("UPDATE t SET x = 1"); err != nil {
		t.Fatal(err)
	}
	mc.settle()
	mc.mocks[1].MatchExpectationsInOrder(false)
	for range 100 {
		mc.mocks[1].ExpectQuery(replaySQL).WillReturnRows(sqlmock.NewRows([]string{"lsn"}).AddRow("0/100"))
	}
	mc.mocks[1] = &lenientMock{mc.mocks[1]}

	mc.mocks[0].ExpectBegin()
	tx, err := mc.db.BeginTx(context.Background(), &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := mc.c.Stats().FallbackReads; got != 1 {
		t.Errorf("FallbackReads %d after a read-only transaction fell back, want 1", got)
	}
	// The transaction holds the only slot: another fallback is refused.
	_, err = mc.db.BeginTx(context.Background(), &sql.TxOptions{ReadOnly: true})
	if !errors.Is(err, ErrFallbackLimit) {
		t.Fatalf("second fallback while the first transaction runs: %v, want ErrFallbackLimit", err)
	}
	mc.mocks[0].ExpectRollback()
	mc.mocks[0] = &lenientMock{mc.mocks[0]}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
}
