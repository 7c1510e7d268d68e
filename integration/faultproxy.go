package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/stream"
	"github.com/rs/zerolog"
)

// Direction says which way a fault acts on a proxied connection.
type Direction int

const (
	// Both directions (the default when a method is given none).
	Both Direction = iota
	// ToServer is what the client sends: queries (toxiproxy's "upstream").
	ToServer
	// ToClient is what the server sends: results (toxiproxy's "downstream").
	ToClient
)

func (d Direction) streams() []string {
	switch d {
	case ToServer:
		return []string{"upstream"}
	case ToClient:
		return []string{"downstream"}
	}
	return []string{"upstream", "downstream"}
}

// FaultProxy is a TCP proxy in the test process between clients and one
// server, built on toxiproxy's toxics: it adds latency, limits bandwidth,
// black-holes or resets the link on demand, and Heal removes every fault.
// A fault applies to the connections already open and to new ones. Its
// methods are safe for concurrent use.
//
// The accept loop is the proxy's own (each accepted connection is handed
// to toxiproxy as a pair of links), so that Reset can reset the connections
// already open too: toxiproxy's own listener sets SO_LINGER 0 only on
// connections opened after its reset_peer toxic was added, and closes the
// others with a FIN, which is not a reset.
type FaultProxy struct {
	upstream string
	ln       net.Listener
	api      *toxiproxy.ApiServer
	px       *toxiproxy.Proxy
	done     chan struct{} // closed when the accept loop returns
	node     int           // the cluster node behind it, or -1

	mu     sync.Mutex
	links  []link   // open ones, and some closed since the last prune
	toxics []string // names of the toxics in place
	seq    int
	closed bool
}

// NewFaultProxy starts a proxy on a free 127.0.0.1 port that forwards to
// upstream (host:port). Close stops it.
func NewFaultProxy(upstream string) (*FaultProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("integration: fault proxy: %w", err)
	}
	api := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	px := toxiproxy.NewProxy(api, "pgreplica-"+upstream, ln.Addr().String(), upstream)
	p := &FaultProxy{upstream: upstream, ln: ln, api: api, px: px, done: make(chan struct{}), node: -1}
	go p.accept()
	return p, nil
}

// Proxy starts a FaultProxy in front of node i, closed when t ends. Build
// the DSN that reaches the node through it with DSNVia.
func (c *Cluster) Proxy(t testing.TB, i int) *FaultProxy {
	t.Helper()
	p, err := NewFaultProxy(fmt.Sprintf("127.0.0.1:%d", c.Port(i)))
	if err != nil {
		t.Fatal(err)
	}
	p.node = i
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}

// DSNVia returns DSN() with each proxied node reached through its proxy
// instead: same host order, so node i is still the i-th host, and
// inet_server_port() (NodeAt) still names the node behind the proxy.
func (c *Cluster) DSNVia(proxies ...*FaultProxy) string {
	hosts := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		hosts[i] = fmt.Sprintf("127.0.0.1:%d", n.port)
	}
	for _, p := range proxies {
		if p.node < 0 {
			panic("integration: DSNVia: the proxy was not made by Cluster.Proxy")
		}
		hosts[p.node] = p.Addr()
	}
	return "postgres://postgres@" + strings.Join(hosts, ",") + "/postgres?sslmode=disable"
}

// Addr returns the proxy's host:port.
func (p *FaultProxy) Addr() string { return p.ln.Addr().String() }

// Upstream returns the host:port the proxy forwards to.
func (p *FaultProxy) Upstream() string { return p.upstream }

// Conns returns the number of client connections open through the proxy.
func (p *FaultProxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.prune()
	n := 0
	for _, l := range p.links {
		if isOpen(l.client) {
			n++
		}
	}
	return n
}

// link is one proxied connection: the client's and the proxy's own to
// the server.
type link struct{ client, server *net.TCPConn }

// isOpen says whether c has not been closed (by either end of the proxy's
// links, or by Close).
func isOpen(c *net.TCPConn) bool {
	rc, err := c.SyscallConn()
	return err == nil && rc.Control(func(uintptr) {}) == nil
}

// prune forgets the links whose both ends are closed; p.mu is held.
func (p *FaultProxy) prune() {
	p.links = slices.DeleteFunc(p.links, func(l link) bool { return !isOpen(l.client) && !isOpen(l.server) })
}

// Latency delays every chunk of data by d in the given directions (both
// when none is given): with both, a round trip takes 2d longer.
func (p *FaultProxy) Latency(d time.Duration, dirs ...Direction) error {
	return p.add("latency", fmt.Sprintf(`{"latency":%d}`, d.Milliseconds()), dirs)
}

// Bandwidth limits the link to kbps kilobytes per second in the given
// directions (both when none is given).
func (p *FaultProxy) Bandwidth(kbps int64, dirs ...Direction) error {
	return p.add("bandwidth", fmt.Sprintf(`{"rate":%d}`, kbps), dirs)
}

// Blackhole stops forwarding: data sent either way is dropped and nothing
// is closed, on the connections already open and on new ones (which the
// proxy still accepts: to the client the server has gone silent). It is
// what a network partition or a half-open connection looks like to a
// client. Heal closes the connections that lived through it.
func (p *FaultProxy) Blackhole() error {
	return p.add("timeout", `{"timeout":0}`, nil)
}

// Reset resets a connection (TCP RST, SO_LINGER 0) as soon as data comes
// through it in the given directions (both when none is given), open
// connections and new ones alike, until Heal. With ToClient a query
// reaches the server and its result resets the connection.
func (p *FaultProxy) Reset(dirs ...Direction) error {
	p.mu.Lock()
	p.prune()
	for _, l := range p.links {
		_ = l.client.SetLinger(0) // fails only on a closed one
		_ = l.server.SetLinger(0)
	}
	p.mu.Unlock()
	return p.add("reset_peer", `{"timeout":0}`, dirs)
}

// Heal removes every fault. Connections that were black-holed or reset
// are closed; those that were only slowed carry on.
func (p *FaultProxy) Heal() error {
	p.mu.Lock()
	names := p.toxics
	p.toxics = nil
	p.mu.Unlock()
	var errs []error
	for _, name := range names {
		if err := p.px.Toxics.RemoveToxic(context.Background(), name); err != nil {
			errs = append(errs, fmt.Errorf("integration: fault proxy: remove %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// Close stops accepting, closes every connection through the proxy and
// waits for its accept loop. It may be called more than once.
func (p *FaultProxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	err := p.ln.Close()
	for _, l := range p.links {
		l.client.Close()
		l.server.Close()
	}
	p.links = nil
	p.mu.Unlock()
	<-p.done
	return err
}

// add puts one toxic per direction at the end of the chains.
func (p *FaultProxy) add(typ, attrs string, dirs []Direction) error {
	d := Both
	if len(dirs) > 0 {
		d = dirs[0]
	}
	for _, s := range d.streams() {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return errors.New("integration: fault proxy is closed")
		}
		p.seq++
		name := fmt.Sprintf("%s_%s_%d", typ, s, p.seq)
		p.mu.Unlock()
		body := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name, typ, s, attrs)
		if _, err := p.px.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
			return fmt.Errorf("integration: fault proxy: add %s: %w", typ, err)
		}
		p.mu.Lock()
		p.toxics = append(p.toxics, name)
		p.mu.Unlock()
	}
	return nil
}

// accept hands every client connection and its own connection to the
// server to toxiproxy as two links, one per direction, as toxiproxy's own
// listener does.
func (p *FaultProxy) accept() {
	defer close(p.done)
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		client := c.(*net.TCPConn)
		s, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
		if err != nil {
			client.Close() // the server is down: so is the link
			continue
		}
		server := s.(*net.TCPConn)
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			client.Close()
			server.Close()
			return
		}
		p.prune()
		p.links = append(p.links, link{client, server})
		p.mu.Unlock()
		name := client.RemoteAddr().String()
		p.px.Toxics.StartLink(p.api, name+"upstream", client, server, stream.Upstream)
		p.px.Toxics.StartLink(p.api, name+"downstream", server, client, stream.Downstream)
	}
}
