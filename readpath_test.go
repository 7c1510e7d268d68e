package pgreplica

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/DATA-DOG/go-sqlmock"
)

// TestReadPathReads runs PGREPLICA_READPATH_READS plain reads on a
// replica (default settings, nothing written), for .ci/readpath, which
// runs it twice under coverage and names the root files whose code ran
// once more per extra read: the files a common database/sql read
// crosses. It is a measure, not a check, and skips without the variable.
func TestReadPathReads(t *testing.T) {
	n, err := strconv.Atoi(os.Getenv("PGREPLICA_READPATH_READS"))
	if err != nil {
		t.Skip("PGREPLICA_READPATH_READS is not set: run .ci/readpath")
	}
	mc := newMockCluster(t, 1, nil)
	mc.refresh()
	const q = "SELECT x FROM t WHERE id = 1"
	for range n {
		mc.mocks[1].ExpectQuery(q).WillReturnRows(sqlmock.NewRows([]string{"x"}).AddRow(1))
	}
	for range n {
		var x int
		if err := mc.db.QueryRowContext(context.Background(), q).Scan(&x); err != nil {
			t.Fatal(err)
		}
	}
}
