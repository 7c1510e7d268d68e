package prober

import (
	"context"
	"database/sql/driver"
	"fmt"

	"github.com/pgreplica/pgreplica/internal/inner"
	"github.com/pgreplica/pgreplica/internal/probe"
)

// checkPrivileges returns the functions and views the role of c may not
// use, and the role's name. A platform may revoke from PUBLIC functions
// the probe calls: the prober does without those it can (probe.Query)
// and fails loudly (Config.Denied) for those the router needs.
func checkPrivileges(ctx context.Context, c driver.Conn) (probe.Fn, string, error) {
	rows, err := inner.Query(ctx, c, probe.PrivilegeSQL, nil)
	if err != nil {
		return 0, "", fmt.Errorf("probe: checking privileges: %w", err)
	}
	defer rows.Close()
	vals := make([]driver.Value, probe.PrivilegeColumns)
	if err := rows.Next(vals); err != nil {
		return 0, "", fmt.Errorf("probe: checking privileges: %w", err)
	}
	denied, user := probe.ReadPrivileges(vals)
	return denied, user, nil
}
