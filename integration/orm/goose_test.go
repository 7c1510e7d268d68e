package orm_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/pgreplica/pgreplica"
)

// gooseChildEnv makes the test binary a goose run of its own (gooseChild):
// its value is the command, up or status, and gooseDSNEnv the DSN.
const (
	gooseChildEnv = "PGREPLICA_GOOSE_CHILD"
	gooseDSNEnv   = "PGREPLICA_GOOSE_DSN"
)

// gooseMigrations create a table and fill it: the second reads the first's
// table, as migrations do.
var gooseMigrations = fstest.MapFS{
	"00001_goose_items.sql": {Data: []byte(`-- +goose Up
CREATE TABLE goose_items (id int PRIMARY KEY, name text NOT NULL);
-- +goose Down
DROP TABLE goose_items;
`)},
	"00002_goose_items_rows.sql": {Data: []byte(`-- +goose Up
INSERT INTO goose_items VALUES (1, 'one'), (2, 'two');
-- +goose Down
DELETE FROM goose_items;
`)},
}

// TestGooseNextProcess runs goose as a deploy does: one process migrates,
// the next one (a second instance starting, the next deploy step) asks for
// the status and migrates again at once, with the default settings while
// the replicas are behind: their replay is paused (200 ms of apply delay
// showed it too, when the next process started within them; a pause
// makes it certain). The next process must see the
// database as the first left it: a process never reads older than the
// database was when it started. Before pgreplica knew that, status failed
// (relation "goose_db_version" does not exist, read on a replica) and the
// second up applied the first migration again (duplicate key).
func TestGooseNextProcess(t *testing.T) {
	ctx := ctxFor(t)
	base := dsn(t)
	for _, q := range []string{"DROP TABLE IF EXISTS goose_items", "DROP TABLE IF EXISTS goose_db_version"} {
		if err := cluster.Exec(ctx, cluster.Primary(), q); err != nil {
			t.Fatal(err)
		}
	}
	if err := cluster.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range cluster.Len() {
		if i == cluster.Primary() {
			continue
		}
		if err := cluster.PauseReplay(ctx, i); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cluster.ResumeReplay(context.Background(), i) })
	}
	for _, step := range []string{"up", "status", "up"} {
		out, err := runGooseChild(ctx, step, base)
		if err != nil {
			t.Fatalf("goose %s in a new process: %v\n%s", step, err, out)
		}
		t.Logf("goose %s: %s", step, strings.TrimSpace(out))
	}
}

// runGooseChild runs this test binary as a goose process (gooseChild).
func runGooseChild(ctx context.Context, step, dsn string) (string, error) {
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), gooseChildEnv+"="+step, gooseDSNEnv+"="+dsn)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// gooseChild is the goose process: it runs one command with the default
// settings and reports an error with its exit status.
func gooseChild(step string) int {
	if err := gooseRun(step, os.Getenv(gooseDSNEnv)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func gooseRun(step, dsn string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := sql.Open(pgreplica.DriverName, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, gooseMigrations)
	if err != nil {
		return err
	}
	switch step {
	case "up":
		res, err := p.Up(ctx)
		if err != nil {
			return err
		}
		fmt.Printf("applied %d\n", len(res))
	case "status":
		st, err := p.Status(ctx)
		if err != nil {
			return err
		}
		for _, s := range st {
			if s.State != goose.StateApplied {
				return fmt.Errorf("migration %d is %s, applied by the previous process", s.Source.Version, s.State)
			}
		}
		fmt.Printf("%d applied\n", len(st))
	default:
		return errors.New("unknown goose step " + step)
	}
	v, err := p.GetDBVersion(ctx)
	if err != nil {
		return err
	}
	if v != 2 {
		return fmt.Errorf("version %d after %s, want 2", v, step)
	}
	return nil
}
