package checker

import (
	"context"
	"time"
)

// Cluster is what the checker needs of a test cluster: addresses, admin
// SQL, and the fault knobs. *integration.Cluster implements it.
// Operations that start, stop or reconfigure one node never overlap.
type Cluster interface {
	// DSN is a multi-host URL of every node; NodeDSN(i) names node i alone.
	DSN() string
	NodeDSN(i int) string
	// Port is node i's TCP port, which identifies it in inet_server_port().
	Port(i int) int
	Len() int
	Primary() int
	// Exec runs admin SQL on node i.
	Exec(ctx context.Context, i int, sql string, args ...any) error
	// QueryString runs a one-value query on node i and returns the value
	// in PostgreSQL's text form ("" for NULL).
	QueryString(ctx context.Context, i int, sql string, args ...any) (string, error)
	// WaitCaughtUp waits until every replica whose replay is not paused
	// has replayed everything committed before the call.
	WaitCaughtUp(ctx context.Context) error
	SetApplyDelay(ctx context.Context, i int, d time.Duration) error
	PauseReplay(ctx context.Context, i int) error
	ResumeReplay(ctx context.Context, i int) error
	// Kill crashes node i (SIGKILL to all of its processes) and returns
	// once they are gone; Start starts it again and returns once it
	// accepts connections (a replica: once it is consistent). Start does
	// nothing on a running node.
	Kill(i int) error
	Start(ctx context.Context, i int) error
}

// replicasOf lists the nodes other than the primary.
func replicasOf(cl Cluster) []int {
	var out []int
	for i := range cl.Len() {
		if i != cl.Primary() {
			out = append(out, i)
		}
	}
	return out
}

// portMap maps each node's port to its index, to turn inet_server_port()
// into a node.
func portMap(cl Cluster) map[int]int {
	m := make(map[int]int, cl.Len())
	for i := range cl.Len() {
		m[cl.Port(i)] = i
	}
	return m
}
