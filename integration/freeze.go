package integration

import "fmt"

// Freeze stops every process of node i where it stands, as a host with a
// stalled disk or a hung virtual machine: its sockets stay open and the
// kernel still accepts connections and queues what clients send, but
// nothing answers, and no error tells a client so. Thaw lets it run on.
// The local runtime sends SIGSTOP to the postmaster first (so that it
// forks nothing more) and then to every other server process; the Docker
// runtime pauses the container. Close thaws a frozen node first.
func (c *Cluster) Freeze(i int) error { return c.setFrozen(i, true) }

// Thaw resumes node i after Freeze. Thawing a node that is not frozen does
// nothing.
func (c *Cluster) Thaw(i int) error { return c.setFrozen(i, false) }

func (c *Cluster) setFrozen(i int, frozen bool) error {
	n, err := c.node(i)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n.frozen == frozen {
		return nil
	}
	if !n.running {
		return fmt.Errorf("integration: node %d is not running", i)
	}
	if err := c.srv.freeze(n, frozen); err != nil {
		return fmt.Errorf("integration: freeze node %d (%v): %w", i, frozen, err)
	}
	n.frozen = frozen
	return nil
}
