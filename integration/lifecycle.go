package integration

import (
	"context"
	"fmt"
)

// Stop shuts node i down in fast mode (open transactions are rolled back,
// a shutdown checkpoint is written and sent to the replicas) and returns
// once all of its processes have exited. Stopping a stopped node does
// nothing.
func (c *Cluster) Stop(ctx context.Context, i int) error {
	n, err := c.node(i)
	if err != nil {
		return err
	}
	return c.stopNode(ctx, n)
}

// stopNode stops n in fast mode and records it.
func (c *Cluster) stopNode(ctx context.Context, n *node) error {
	if err := c.srv.stop(ctx, n, false); err != nil {
		return err
	}
	c.setRunning(n, false)
	return nil
}

func (c *Cluster) running(n *node) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return n.running
}

func (c *Cluster) setRunning(n *node, running bool) {
	c.mu.Lock()
	n.running = running
	c.mu.Unlock()
}

// Kill crashes node i: it sends SIGKILL to the postmaster and every process
// it forked, and returns once they are gone. Start brings the node back
// through crash recovery. Killing a stopped node does nothing.
func (c *Cluster) Kill(i int) error {
	n, err := c.node(i)
	if err != nil {
		return err
	}
	if !c.running(n) {
		return nil
	}
	if err := c.srv.kill(n); err != nil {
		return err
	}
	c.setRunning(n, false)
	return nil
}

// Start starts node i again on its port after Stop or Kill (pg_ctl start
// -w, or a container start) and returns once it accepts connections; a
// replica then reconnects to its upstream by itself (see WaitStreaming).
// Starting a running node does nothing.
func (c *Cluster) Start(ctx context.Context, i int) error {
	n, err := c.node(i)
	if err != nil {
		return err
	}
	if c.running(n) && c.srv.alive(n) {
		return nil
	}
	if err := c.srv.start(ctx, n); err != nil {
		return c.withLogs(err, i)
	}
	c.setRunning(n, true)
	return nil
}

// Promote promotes replica i to primary (pg_promote) and returns once it
// has left recovery; Primary then returns i. The other nodes are left as
// they are: stop the old primary first to simulate a failover, and Repoint
// the other replicas to follow the new primary.
func (c *Cluster) Promote(ctx context.Context, i int) error {
	n, err := c.node(i)
	if err != nil {
		return err
	}
	c.mu.Lock()
	standby, running := n.standby, n.running
	c.mu.Unlock()
	if !running || !standby {
		return fmt.Errorf("integration: cannot promote node %d: it is not a running replica", i)
	}
	if err := c.Exec(ctx, i, "SELECT pg_promote(false)"); err != nil {
		return err
	}
	if err := c.waitValue(ctx, i, fmt.Sprintf("node %d to leave recovery", i),
		"SELECT pg_is_in_recovery()", "f"); err != nil {
		return c.withLogs(err, i)
	}
	c.mu.Lock()
	c.primary, n.standby, n.upstream = i, false, -1
	c.mu.Unlock()
	return nil
}

// Demote turns primary i into a replica of replica upstream, as the
// first half of a switchover does: it stops node i cleanly (its shutdown
// checkpoint reaches the replicas), makes it follow upstream and starts
// it. Until Promote(upstream), every node is in recovery and the cluster
// has no primary; upstream then leaves recovery on a new timeline, which
// node i follows (it stopped at a point upstream has replayed). Call
// WaitStreaming after the promotion.
func (c *Cluster) Demote(ctx context.Context, i, upstream int) error {
	if c.Primary() != i {
		return fmt.Errorf("integration: node %d is not the primary", i)
	}
	c.mu.Lock()
	c.primary = -1
	c.mu.Unlock()
	return c.repoint(ctx, i, upstream)
}

// Repoint makes node i a replica of node upstream: it stops node i if it
// runs, points primary_conninfo at upstream (in postgresql.auto.conf, with
// application_name "replica<i>"), makes sure standby.signal exists and
// starts the node. Call WaitStreaming to wait until it streams.
//
// A replica follows a promoted sibling across the timeline switch as long
// as it has not replayed WAL past the promotion point (stop the old primary
// before promoting, then repoint). A former primary can become a replica
// the same way if it was stopped cleanly before the promotion; one that
// diverged never streams (the harness does not run pg_rewind).
func (c *Cluster) Repoint(ctx context.Context, i, upstream int) error {
	if c.Primary() == i {
		return fmt.Errorf("integration: node %d is the primary; promote another node first", i)
	}
	return c.repoint(ctx, i, upstream)
}

// repoint is Repoint without its check that node i is not the primary.
func (c *Cluster) repoint(ctx context.Context, i, upstream int) error {
	n, err := c.node(i)
	if err != nil {
		return err
	}
	if _, err := c.node(upstream); err != nil {
		return err
	}
	up := c.nodes[upstream]
	if i == upstream {
		return fmt.Errorf("integration: node %d cannot follow itself", i)
	}
	if err := c.stopNode(ctx, n); err != nil {
		return err
	}
	if err := follow(c.srv, n, conninfo(c.srv, n, up)); err != nil {
		return err
	}
	c.setState(n, false, true, upstream)
	if err := c.srv.start(ctx, n); err != nil {
		return c.withLogs(err, i)
	}
	c.setRunning(n, true)
	return nil
}
