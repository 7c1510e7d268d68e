package pgreplica

import (
	"fmt"
	"strings"
)

// topology is one immutable view of the cluster, rebuilt by the monitor
// after every round and read lock-free by every statement.
type topology struct {
	primary  *node
	writeErr error   // why there is no primary (wraps ErrNoPrimary or ErrSplitBrain)
	replicas []*node // healthy replicas of the primary's cluster
	// reachable is false when no host answered.
	reachable bool
	reachErr  error
}

// buildTopology decides roles from the latest status of every node.
// Exactly one primary gets writes. Several hosts out of recovery (a former
// primary back beside a promoted replica) resolve to the one on the highest
// timeline; a tie is split brain and nobody gets writes.
func buildTopology(nodes []*node, excludeSync bool) *topology {
	t := &topology{}
	var primaries []*node
	var down []string
	for _, n := range nodes {
		st := n.status.Load()
		if !st.healthy() {
			if st != nil && st.err != nil {
				down = append(down, fmt.Sprintf("%s: %v", n.name, st.err))
			}
			continue
		}
		t.reachable = true
		if st.role == rolePrimary {
			primaries = append(primaries, n)
		}
	}
	if !t.reachable {
		t.reachErr = fmt.Errorf("%w: %s", ErrNoReachableHost, strings.Join(down, "; "))
	}

	switch len(primaries) {
	case 0:
		t.writeErr = fmt.Errorf("%w: every reachable host is in recovery", ErrNoPrimary)
		if !t.reachable {
			t.writeErr = fmt.Errorf("%w: %w", ErrNoPrimary, t.reachErr)
		}
	case 1:
		t.primary = primaries[0]
	default:
		t.primary, t.writeErr = highestTimeline(primaries)
	}

	for _, n := range nodes {
		if t.excluded(n, excludeSync) == "" {
			t.replicas = append(t.replicas, n)
		}
	}
	return t
}

// excluded says why a node is not in the read pool ("" when it is).
func (t *topology) excluded(n *node, excludeSync bool) string {
	st := n.status.Load()
	switch {
	case st == nil:
		return "not probed yet"
	case st.err != nil:
		return "unreachable: " + st.err.Error()
	case st.role == rolePrimary && n != t.primary && t.primary != nil:
		return fmt.Sprintf("out of recovery on timeline %d beside the primary on timeline %d: superseded, gets no writes", st.timeline, t.primary.status.Load().timeline)
	case st.role != roleReplica:
		return "not a replica"
	}
	if t.primary != nil {
		pst := t.primary.status.Load()
		if st.sysid != pst.sysid {
			// A replica of another cluster: never route to it.
			return fmt.Sprintf("system identifier %d differs from the primary's %d", st.sysid, pst.sysid)
		}
		if ss := pst.syncStates[st.appName]; excludeSync && st.appName != "" && (ss == "sync" || ss == "quorum") {
			return "synchronous standby (excluded by configuration)"
		}
	}
	return ""
}

func highestTimeline(primaries []*node) (*node, error) {
	var best *node
	var bestTL uint32
	tie := false
	names := make([]string, len(primaries))
	for i, n := range primaries {
		tl := n.status.Load().timeline
		names[i] = fmt.Sprintf("%s (timeline %d)", n.name, tl)
		switch {
		case best == nil || tl > bestTL:
			best, bestTL, tie = n, tl, false
		case tl == bestTL:
			tie = true
		}
	}
	if tie {
		return nil, fmt.Errorf("%w: %s", ErrSplitBrain, strings.Join(names, ", "))
	}
	return best, nil
}

// sysid is the primary's system identifier (0 when unknown).
func (t *topology) sysid() uint64 {
	if t.primary == nil {
		return 0
	}
	return t.primary.status.Load().sysid
}

// timeline is the primary's timeline (0 when unknown).
func (t *topology) timeline() uint32 {
	if t.primary == nil {
		return 0
	}
	return t.primary.status.Load().timeline
}
