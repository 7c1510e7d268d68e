package integration

import "fmt"

// PID returns the process id of node i's postmaster, as this machine
// numbers processes: its backends and auxiliary processes are its
// children, so /proc/<pid> and the processes whose parent it is account
// for all the CPU time the server uses (the benchmarks measure the
// primary's cost per write that way). It fails when the node is not
// running, or when the runtime cannot say: a Docker engine that runs in a
// virtual machine numbers its processes in a namespace this machine cannot
// see.
func (c *Cluster) PID(i int) (int, error) {
	n, err := c.node(i)
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	running := n.running
	c.mu.Unlock()
	if !running {
		return 0, fmt.Errorf("integration: node %d is not running", i)
	}
	return c.srv.pid(n)
}
