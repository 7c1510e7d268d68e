package pgreplica

import (
	"testing"
	"time"
)

// testTopology builds a topology of n healthy replicas (zones a, b, a, …)
// with replay positions 100, 200, ….
func testTopology(n int) (*Connector, *topology) {
	c := &Connector{}
	t := &topology{}
	for i := range n {
		nd := &node{idx: i, name: "r", host: Host{Zone: string(rune('a' + i%2))}}
		nd.replay.Store(uint64(100 * (i + 1)))
		nd.rtt.Store(int64(time.Millisecond) * int64(i+1))
		t.replicas = append(t.replicas, nd)
	}
	return c, t
}

func TestPickPolicies(t *testing.T) {
	c, top := testTopology(3)
	all := func(*node) bool { return true }

	seen := map[int]int{}
	for range 30 {
		seen[c.pickReplica(top, all).idx]++
	}
	if len(seen) != 3 || seen[0] != 10 {
		t.Errorf("round robin spread %v, want 10 each", seen)
	}

	c.cfg.Policy = PolicyLeastLag
	if n := c.pickReplica(top, all); n.idx != 2 {
		t.Errorf("least lag picked %d, want 2 (highest replay)", n.idx)
	}

	c.cfg.Policy = PolicyLatency
	for range 20 {
		// rtts 1, 2, 3 ms: all within the 15 ms window.
		if n := c.pickReplica(top, all); n == nil {
			t.Fatal("latency policy picked nothing")
		}
	}
	top.replicas[2].rtt.Store(int64(50 * time.Millisecond))
	for range 50 {
		if n := c.pickReplica(top, all); n.idx == 2 {
			t.Fatal("latency policy picked a replica 49 ms slower than the fastest")
		}
	}

	c.cfg.Policy = PolicyRoundRobin
	c.cfg.Zone = "b"
	for range 10 {
		if n := c.pickReplica(top, all); n.host.Zone != "b" {
			t.Fatalf("zone preference picked zone %q", n.host.Zone)
		}
	}
	notB := func(n *node) bool { return n.host.Zone != "b" }
	if n := c.pickReplica(top, notB); n == nil || n.host.Zone != "a" {
		t.Errorf("no zone-b replica qualifies: want a zone-a one, got %v", n)
	}
	if n := c.pickReplica(top, func(*node) bool { return false }); n != nil {
		t.Errorf("nothing qualifies: got %v", n)
	}
}

// BenchmarkSelect measures replica selection on the hot path for every
// policy: it must not allocate.
func BenchmarkSelect(b *testing.B) {
	for _, pc := range []struct {
		name   string
		policy Policy
		zone   string
	}{
		{"round_robin", PolicyRoundRobin, ""},
		{"random", PolicyRandom, ""},
		{"least_lag", PolicyLeastLag, ""},
		{"latency", PolicyLatency, ""},
		{"zone", PolicyRoundRobin, "b"},
	} {
		b.Run(pc.name, func(b *testing.B) {
			c, top := testTopology(3)
			c.cfg.Policy, c.cfg.Zone = pc.policy, pc.zone
			need := LSN(150)
			fresh := func(n *node) bool { return !n.suspect.Load() && LSN(n.replay.Load()) >= need }
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if c.pickReplica(top, fresh) == nil {
						b.Fatal("no replica")
					}
				}
			})
		})
	}
}
