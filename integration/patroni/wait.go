//go:build linux

package patroni

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// Health is what WaitHealthy found: the leader and its streaming
// replicas.
type Health struct {
	Leader   int   // the leader member's index
	Replicas []int // the members streaming from it, running on its timeline
	// SyncStandby is the synchronous standby's index, -1 when there is
	// none (synchronous_mode off).
	SyncStandby int
	Timeline    int
	State       *ClusterState
}

// WaitHealthy waits until the cluster has a leader, running, that accepts
// writes, and at least replicas other members that run as its replicas
// on its timeline, with a known lag, and appear as streaming in the
// leader's pg_stat_replication (GET /patroni); with synchronous_mode, one
// of them must be the synchronous standby. Patroni 3.0 reports a
// streaming replica's state as "running", so the leader's walsenders tell
// streaming apart. The error says what the cluster looked like last.
func (c *Cluster) WaitHealthy(ctx context.Context, replicas int) (Health, error) {
	var h Health
	var dead error
	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	err := c.poll(pctx, fmt.Sprintf("a leader and %d streaming replicas", replicas), func(ctx context.Context) (bool, string) {
		if dead = c.deadPatroni(); dead != nil {
			cancel(dead) // it will not come back: no use waiting
			return false, dead.Error()
		}
		var why string
		h, why = c.health(ctx, replicas)
		return why == "", why
	})
	if dead != nil {
		return h, c.withState(dead)
	}
	if err != nil {
		return h, fmt.Errorf("%w\n%s", err, c.Describe(ctx))
	}
	return h, nil
}

// health checks WaitHealthy's condition once; why is "" when it holds.
func (c *Cluster) health(ctx context.Context, replicas int) (Health, string) {
	h := Health{Leader: -1, SyncStandby: -1}
	st, err := c.Cluster(ctx)
	if err != nil {
		return h, err.Error()
	}
	h.State = st
	leader, ok := st.Leader()
	if !ok {
		return h, "no leader\n" + st.String()
	}
	h.Leader = c.index(leader.Name)
	h.Timeline = leader.Timeline
	if leader.State != "running" || h.Leader < 0 {
		return h, "leader " + leader.Name + " is " + leader.State + "\n" + st.String()
	}
	ls, err := c.Status(ctx, h.Leader)
	if err != nil {
		return h, err.Error()
	}
	if ls.Role != "master" && ls.Role != "primary" {
		return h, fmt.Sprintf("leader %s reports role %s", leader.Name, ls.Role)
	}
	if ls.Timeline != 0 {
		h.Timeline = ls.Timeline
	}
	streaming := map[string]string{}
	for _, r := range ls.Replication {
		if r.State == "streaming" {
			streaming[r.ApplicationName] = r.SyncState
		}
	}
	var missing []string
	for _, m := range st.Members {
		if m.Role != "replica" && m.Role != "sync_standby" {
			continue
		}
		_, lagKnown := m.Lag()
		_, streams := streaming[m.Name]
		if m.State == "running" && m.Timeline == h.Timeline && lagKnown && streams {
			i := c.index(m.Name)
			h.Replicas = append(h.Replicas, i)
			if m.Role == "sync_standby" {
				h.SyncStandby = i
			}
		} else {
			missing = append(missing, fmt.Sprintf("%s (%s, timeline %d, lag %s, streaming %v)",
				m.Name, m.State, m.Timeline, m.LagRaw, streams))
		}
	}
	slices.Sort(h.Replicas)
	if len(h.Replicas) < replicas {
		return h, fmt.Sprintf("leader %s on timeline %d has %d streaming replicas %v, want %d; not yet: %s\n%s",
			leader.Name, h.Timeline, len(h.Replicas), h.Replicas, replicas, strings.Join(missing, ", "), st.String())
	}
	if c.opts.SynchronousMode && h.SyncStandby < 0 {
		return h, "no synchronous standby yet\n" + st.String()
	}
	if v, err := c.QueryString(ctx, h.Leader, "SELECT pg_is_in_recovery()"); err != nil || v != "false" {
		return h, fmt.Sprintf("leader %s: pg_is_in_recovery() = %q, %v", leader.Name, v, err)
	}
	return h, ""
}

// WaitLeader waits until a member other than not (-1: any) holds the
// leader key, runs, and its PostgreSQL accepts writes (is not in
// recovery), and returns it.
func (c *Cluster) WaitLeader(ctx context.Context, not int) (int, error) {
	leader := -1
	err := c.poll(ctx, fmt.Sprintf("a leader other than m%d", not), func(ctx context.Context) (bool, string) {
		st, err := c.Cluster(ctx)
		if err != nil {
			return false, err.Error()
		}
		l, ok := st.Leader()
		if !ok {
			return false, "no leader\n" + st.String()
		}
		i := c.index(l.Name)
		if i < 0 || i == not || l.State != "running" {
			return false, st.String()
		}
		if v, err := c.QueryString(ctx, i, "SELECT pg_is_in_recovery()"); err != nil || v != "false" {
			return false, fmt.Sprintf("%s holds the leader key; pg_is_in_recovery() = %q, %v", l.Name, v, err)
		}
		leader = i
		return true, ""
	})
	if err != nil {
		return -1, fmt.Errorf("%w\n%s", err, c.Describe(ctx))
	}
	return leader, nil
}

// Leader returns the member that holds the leader key and runs, as
// GET /cluster says now.
func (c *Cluster) Leader(ctx context.Context) (int, error) {
	st, err := c.Cluster(ctx)
	if err != nil {
		return -1, err
	}
	l, ok := st.Leader()
	if !ok || l.State != "running" {
		return -1, fmt.Errorf("patroni: no running leader\n%s", st)
	}
	return c.index(l.Name), nil
}

// index maps a member name to its index, -1 if unknown.
func (c *Cluster) index(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.members {
		if m.name == name {
			return m.index
		}
	}
	return -1
}

// deadPatroni reports a live member whose Patroni daemon exited (it could
// not bind its port, or its configuration is wrong), with its log.
func (c *Cluster) deadPatroni() error {
	for _, i := range c.Live() {
		m := c.member(i)
		c.mu.Lock()
		p := m.patroni
		c.mu.Unlock()
		if p != nil && !p.running() {
			return fmt.Errorf("patroni: m%d's Patroni daemon exited:\n%s", i, logTail(p.logPath, 20))
		}
	}
	return nil
}
