package pgreplica

import (
	"cmp"
	"context"
	"errors"
	"net"
	"slices"
	"sync/atomic"
	"time"
)

// Host names as pgx resolves them. A configured name is looked up as pgx
// looks one up (Config.LookupFunc, else the system resolver), and when it
// gives several addresses each becomes a node of its own, dialled at that
// address and verified (TLS) under the name: `localhost` (127.0.0.1 and
// ::1), a dual-stack name and a headless Service alike. An address that
// refuses is that node down, never the name unusable. Nodes of one name
// that reached the same server incarnation (the same server under two
// addresses) are one server: the topology routes to the first that
// answers and shows the others as its aliases (topology.go). A name that
// gives one address stays one node dialled by name, so that it follows
// its DNS answer as pgx would (a cloud endpoint moved at failover); the
// names are looked up again while the handle runs, and a name's nodes
// follow its answers (followNames).

// How often a name's addresses are looked up again: every
// resolveEvery while they answer, every resolveFailing while one of
// them fails (a pod gone, a moved endpoint: found within seconds) or
// when the answers name their own ports (a registry such as Patroni's
// REST API, whose membership changes at once, not DNS). A lookup costs
// the resolver one query, no server anything.
const (
	resolveEvery   = 30 * time.Second
	resolveFailing = 2 * time.Second
)

// nameWatch is when a configured host's name was last looked up, and why
// that lookup failed (nil: it answered), which Nodes shows.
type nameWatch struct {
	last   time.Time
	failed atomic.Pointer[error]
}

// watchNames looks the names up again as they fall due until ctx ends.
func (c *Connector) watchNames(ctx context.Context) {
	if !slices.ContainsFunc(c.cfg.Hosts, func(h Host) bool { return isName(h.Addr) }) {
		return
	}
	tick := time.NewTicker(resolveFailing / 2)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			if err := c.followNames(ctx, now); err != nil {
				c.log.Warn("pgreplica: a resolved address cannot be used", "err", err)
			}
		}
	}
}

// followNames looks up each name that is due and makes its nodes follow
// the answer: a node per address when there are several (or once there
// were), the node of an address no longer given retired. A name that
// does not resolve keeps what it had; one address of a name never
// expanded stays one node dialled by name. The first call (at start)
// runs before the probers exist.
func (c *Connector) followNames(ctx context.Context, now time.Time) error {
	lookup := c.cfg.LookupFunc
	if lookup == nil {
		lookup = net.DefaultResolver.LookupHost
	}
	for entry, h := range c.cfg.Hosts {
		w := &c.names[entry]
		if !isName(h.Addr) {
			continue
		}
		cur := c.entryNodes(entry)
		every := resolveEvery
		if slices.ContainsFunc(cur, func(n *node) bool { s := n.status.Load(); return s != nil && s.err != nil || hasPort(n.pin) }) {
			every = resolveFailing // a pod gone, a moved endpoint, a registry
		}
		if !w.last.IsZero() && now.Sub(w.last) < every {
			continue
		}
		w.last = now
		lctx, cancel := context.WithTimeout(ctx, c.cfg.ConnectTimeout)
		addrs, err := lookup(lctx, h.Addr)
		cancel()
		addrs = distinct(addrs, maxHosts)
		if err == nil && len(addrs) == 0 {
			err = errors.New("no address")
		}
		if err != nil {
			w.failed.Store(&err) // what it had stays
			continue
		}
		w.failed.Store(nil)
		if len(addrs) == 1 && len(cur) == 1 && cur[0].pin == "" && !hasPort(addrs[0]) {
			continue
		}
		if err := c.setAddrs(entry, cur, addrs); err != nil {
			return err
		}
	}
	return nil
}

// hasPort reports whether a name's answer names its own port ("ip:port").
func hasPort(addr string) bool {
	_, _, err := net.SplitHostPort(addr)
	return err == nil
}

// lookupFailed is why the last lookup of configured host entry failed,
// or nil.
func (c *Connector) lookupFailed(entry int) error {
	if entry < 0 || entry >= len(c.names) {
		return nil
	}
	if p := c.names[entry].failed.Load(); p != nil {
		return *p
	}
	return nil
}

// entryNodes returns the nodes of configured host entry that are not
// retired.
func (c *Connector) entryNodes(entry int) []*node {
	var out []*node
	for _, n := range c.nodeList() {
		if n.entry == entry && !n.retired.Load() {
			out = append(out, n)
		}
	}
	return out
}

// setAddrs makes entry's nodes (cur) those of addrs: a node for each new
// address, in a slot a retired node left (once its connections are
// closed) or a new one; the nodes of the others retired. The monitor
// then publishes the new topology.
func (c *Connector) setAddrs(entry int, cur []*node, addrs []string) error {
	c.membersMu.Lock()
	defer c.membersMu.Unlock()
	if c.mon.stopped {
		return nil
	}
	started, subscribed := c.probing, c.mon.subscribed
	nodes := slices.Clone(c.nodeList())
	var dropped []*node
	changed := false
	for _, a := range addrs {
		if slices.ContainsFunc(cur, func(n *node) bool { return n.pin == a }) {
			continue
		}
		slot := slices.IndexFunc(nodes, func(n *node) bool {
			_, inUse := n.pool.statementStat()
			return n.retired.Load() && !inUse
		})
		if slot < 0 && len(nodes) == maxHosts {
			c.log.Warn("pgreplica: too many addresses; the rest are left out", "host", hostName(c.cfg.Hosts[entry]), "max", maxHosts)
			break
		}
		if slot < 0 {
			slot = len(nodes)
			nodes = append(nodes, nil)
		} else {
			dropped = append(dropped, nodes[slot])
		}
		n, err := c.newNode(slot, entry, c.cfg.Hosts[entry], a)
		if err != nil {
			return err
		}
		nodes[slot] = n
		changed = true
		if started {
			c.acquireProber(n)
		}
		if subscribed {
			c.mon.subscribe(n)
		}
	}
	for _, n := range cur {
		if slices.Contains(addrs, n.pin) {
			continue
		}
		n.retired.Store(true)
		changed = true
		if subscribed {
			c.mon.unsubscribe(n)
		}
		if started {
			c.releaseProber(n)
		} else {
			dropped = append(dropped, n) // never used: nothing ran yet
		}
	}
	if !changed {
		return nil
	}
	if !started {
		nodes = slices.DeleteFunc(nodes, func(n *node) bool { return n.retired.Load() })
		slices.SortStableFunc(nodes, func(a, b *node) int { return cmp.Compare(a.entry, b.entry) }) // DSN order
		for i, n := range nodes {
			n.idx = i
		}
	}
	c.nodes.Store(&nodes)
	for _, n := range dropped {
		n.pool.close()
	}
	if started {
		c.mon.rebuild()
		for _, n := range cur {
			if n.retired.Load() {
				n.pool.reap() // closes its idle connections
			}
		}
	} else {
		t := emptyTopology(nodes)
		t.marks = &c.localMarks
		c.topo.Store(t)
	}
	return nil
}

// distinct drops repeated answers (a resolver that lists an address twice
// names one server once) and keeps at most limit.
func distinct(addrs []string, limit int) []string {
	var out []string
	for _, a := range addrs {
		if len(out) < limit && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// pinnedName is how messages name a node dialled at one address of a
// name: "localhost:5432 (::1)".
func pinnedName(h Host, pin string) string {
	name := hostName(h)
	if pin == "" {
		return name
	}
	return name + " (" + pin + ")"
}

// address is where n's connections go (NodeStatus.Address).
func (n *node) address() string {
	if n.pin == "" {
		return hostName(n.host)
	}
	return pinnedAddr(n.pin, hostName(n.host))
}
