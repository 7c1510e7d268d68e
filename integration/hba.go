package integration

import (
	"context"
	"fmt"
	"strings"
)

// SetHBA makes rules the first client authentication rules of every node,
// before the harness's own (which trust every connection), and reloads the
// running nodes; SetHBA(ctx) restores the harness's rules alone. Rules are
// pg_hba.conf lines, matched in order, so that
//
//	host all alice all scram-sha-256
//
// makes the role alice log in with its password while everything else
// stays trusted. The rules must leave the superuser postgres trusted: the
// harness connects as it. SetHBA returns once every running node
// authenticates new connections with the new rules. A stopped node reads
// them when it starts.
func (c *Cluster) SetHBA(ctx context.Context, rules ...string) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, startTimeout)
		defer cancel()
	}
	content := hbaConf
	if len(rules) > 0 {
		content = "# set by SetHBA\n" + strings.Join(rules, "\n") + "\n" + hbaConf
	}
	var running []int
	before := map[int]string{}
	for i, n := range c.nodes {
		if _, err := c.node(i); err != nil {
			return err
		}
		if c.running(n) {
			// When the configuration was last loaded, as a new session
			// sees it: the postmaster's.
			t, err := c.QueryString(ctx, i, "SELECT pg_conf_load_time()::text")
			if err != nil {
				return err
			}
			running, before[i] = append(running, i), t
		}
		if err := c.srv.writeConf(n, "pg_hba.conf", content); err != nil {
			return err
		}
	}
	for _, i := range running {
		if err := c.Exec(ctx, i, "SELECT pg_reload_conf()"); err != nil {
			return err
		}
	}
	for _, i := range running {
		// The postmaster reloads pg_hba.conf in the same step as the
		// rest of the configuration and forks sessions only between
		// steps: a new session that sees a later load time was
		// authenticated with the new rules.
		err := poll(ctx, fmt.Sprintf("node %d to reload pg_hba.conf", i), func(ctx context.Context) (bool, string, error) {
			s, err := c.QueryString(ctx, i, "SELECT (pg_conf_load_time() > $1::timestamptz)::text", before[i])
			if err != nil {
				return false, err.Error(), nil
			}
			return s == "true", "load time " + s, nil
		})
		if err != nil {
			return c.withLogs(err, i)
		}
	}
	return nil
}
