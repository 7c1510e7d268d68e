package integration

import (
	"context"
	"fmt"
	"strconv"
)

// WaitStreaming waits until every running replica streams from its
// upstream (the primary, or the node Repoint named): its WAL receiver is
// streaming from the upstream's address and the upstream's pg_stat_replication
// shows it in state 'streaming'. Stopped nodes are ignored.
func (c *Cluster) WaitStreaming(ctx context.Context) error {
	cs := c.newConns()
	defer cs.close()
	return poll(ctx, "replicas to stream", func(ctx context.Context) (bool, string, error) {
		type edge struct{ replica, upstream *node }
		var edges []edge
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return false, "", errClosed
		}
		for _, n := range c.nodes {
			if n.running && n.standby {
				edges = append(edges, edge{n, c.nodes[n.upstream]})
			}
		}
		c.mu.Unlock()
		for _, e := range edges {
			r, u := e.replica, e.upstream
			got, err := cs.queryString(ctx, r.index,
				"SELECT coalesce((SELECT status || ':' || sender_host || ':' || sender_port FROM pg_stat_wal_receiver), 'no WAL receiver')")
			if err != nil {
				if transient(err) {
					return false, err.Error(), nil
				}
				return false, "", err
			}
			host, port := c.srv.peerAddr(u)
			if want := "streaming:" + host + ":" + strconv.Itoa(port); got != want {
				return false, fmt.Sprintf("node %d: WAL receiver %q, want %q", r.index, got, want), nil
			}
			got, err = cs.queryString(ctx, u.index,
				"SELECT coalesce((SELECT state FROM pg_stat_replication WHERE application_name = $1 "+
					"ORDER BY state = 'streaming' DESC LIMIT 1), 'absent')", r.name)
			if err != nil {
				if transient(err) {
					return false, err.Error(), nil
				}
				return false, "", err
			}
			if got != "streaming" {
				return false, fmt.Sprintf("node %d: %s on node %d is %q", r.index, r.name, u.index, got), nil
			}
		}
		return true, "", nil
	})
}

// WaitCaughtUp waits until every running replica whose replay is not
// paused has replayed the primary's WAL up to the primary's
// pg_current_wal_lsn() at the time of the call, so that everything
// committed on the primary before the call is visible on those replicas.
// A replica with an apply delay catches up once the delay has passed; one
// that follows a stale primary never does (ctx ends the wait).
func (c *Cluster) WaitCaughtUp(ctx context.Context) error {
	p := c.Primary()
	target, err := c.QueryString(ctx, p, "SELECT pg_current_wal_lsn()")
	if err != nil {
		return err
	}
	cs := c.newConns()
	defer cs.close()
	return poll(ctx, "replicas to replay up to "+target, func(ctx context.Context) (bool, string, error) {
		var replicas []int
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return false, "", errClosed
		}
		for _, n := range c.nodes {
			if n.running && n.standby {
				replicas = append(replicas, n.index)
			}
		}
		c.mu.Unlock()
		for _, i := range replicas {
			got, err := cs.queryString(ctx, i, "SELECT CASE WHEN pg_is_wal_replay_paused() THEN 'paused' "+
				"ELSE coalesce(pg_last_wal_replay_lsn()::text, 'none') END")
			if err != nil {
				if transient(err) {
					return false, err.Error(), nil
				}
				return false, "", err
			}
			if got == "paused" {
				continue
			}
			ok, err := lsnAtLeast(got, target)
			if err != nil {
				return false, "", err
			}
			if !ok {
				return false, fmt.Sprintf("node %d replayed up to %s", i, got), nil
			}
		}
		return true, "", nil
	})
}

// lsnAtLeast compares two LSNs in PostgreSQL's text form "X/Y"; "none"
// (nothing replayed yet) is below everything.
func lsnAtLeast(got, want string) (bool, error) {
	if got == "none" {
		return false, nil
	}
	g, err := parseLSN(got)
	if err != nil {
		return false, err
	}
	w, err := parseLSN(want)
	if err != nil {
		return false, err
	}
	return g >= w, nil
}

func parseLSN(s string) (uint64, error) {
	var hi, lo uint32
	if _, err := fmt.Sscanf(s, "%X/%X", &hi, &lo); err != nil {
		return 0, fmt.Errorf("integration: bad LSN %q: %w", s, err)
	}
	return uint64(hi)<<32 | uint64(lo), nil
}
