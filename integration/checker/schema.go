package checker

import (
	"context"
	"fmt"
	"regexp"
)

// The workload's table: one row per (session, key), each write bumps the
// version. Reads return the node and its replay position along with the
// row, from the same statement, so they describe the very snapshot read.
const (
	createSQL = `DROP TABLE IF EXISTS %[1]s;
CREATE TABLE %[1]s (session int, key int, version int NOT NULL, PRIMARY KEY (session, key));
INSERT INTO %[1]s SELECT s, k, 0 FROM generate_series(0, %[2]d) s, generate_series(0, %[3]d) k`
	dropSQL      = `DROP TABLE IF EXISTS %s`
	updateSQL    = `UPDATE %s SET version = $3 WHERE session = $1 AND key = $2`
	returningSQL = `UPDATE %s SET version = $3 WHERE session = $1 AND key = $2 RETURNING inet_server_port()`
	readSQL      = `SELECT version, inet_server_port(), pg_last_wal_replay_lsn()::text FROM %s WHERE session = $1 AND key = $2`
)

// identifier is what Table may be: it is spliced into SQL.
var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// statements is the SQL of one run, for its table.
type statements struct {
	update, returning, read string
}

func statementsFor(table string) statements {
	return statements{
		update:    fmt.Sprintf(updateSQL, table),
		returning: fmt.Sprintf(returningSQL, table),
		read:      fmt.Sprintf(readSQL, table),
	}
}

// createTable (re)creates the table on the primary with every row at
// version 0, and waits until the replicas have it.
func createTable(ctx context.Context, cl Cluster, table string, sessions, keys int) error {
	if err := cl.Exec(ctx, cl.Primary(), fmt.Sprintf(createSQL, table, sessions-1, keys-1)); err != nil {
		return fmt.Errorf("checker: creating %s: %w", table, err)
	}
	if err := cl.WaitCaughtUp(ctx); err != nil {
		return fmt.Errorf("checker: waiting for the replicas to have %s: %w", table, err)
	}
	return nil
}

func dropTable(ctx context.Context, cl Cluster, table string) error {
	if err := cl.Exec(ctx, cl.Primary(), fmt.Sprintf(dropSQL, table)); err != nil {
		return fmt.Errorf("checker: dropping %s: %w", table, err)
	}
	return nil
}
