package bench

import (
	"bytes"
	"net"
	"sync"
)

// countingProxy forwards TCP connections to one server and counts each
// connection's round trips: one per flight of client bytes that follows
// an answer from the server (or starts the connection). Bytes the client
// sends before the server answered belong to the same flight, so a
// pipelined batch counts once, however many messages it holds. A
// CopyInResponse alone is no answer: the client sends its COPY data
// without waiting for it (pgx does), so whether it arrives before the data
// is a matter of timing, not a round trip.
//
// Only connections whose client bytes ever contained marker are counted:
// the benchmark's statements name a table that contains it, and
// pgreplica's monitor connections never do. The monitor's probes and
// captures on a pooled connection are not the operation's either (they
// run while the connection is idle, and captures count as deferred
// statements): a flight that sends one of their texts as a simple query
// (lib/pq), or prepares one (pgx: Parse) or runs a statement so prepared
// (Bind by its name), is left out.
type countingProxy struct {
	ln     net.Listener
	target string
	marker []byte

	mu     sync.Mutex
	conns  []*proxiedConn
	closed bool
	wg     sync.WaitGroup
}

type proxiedConn struct {
	client, server net.Conn

	mu       sync.Mutex
	flights  int
	answered bool // the server spoke since the client's last flight
	monitor  bool // the flight under way is the monitor's
	// monitorStmts are the names of the statements the monitor prepared
	// on this connection.
	monitorStmts map[string]bool
	marked       bool
	tail         []byte // the client stream's last len(marker)-1 bytes
}

func newCountingProxy(target, marker string) (*countingProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &countingProxy{ln: ln, target: target, marker: []byte(marker)}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the host:port clients connect to.
func (p *countingProxy) Addr() string { return p.ln.Addr().String() }

func (p *countingProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		pc := &proxiedConn{client: client, server: server, answered: true}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			client.Close()
			server.Close()
			return
		}
		p.conns = append(p.conns, pc)
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pump(pc, client, server, pc.fromClient)
		go p.pump(pc, server, client, pc.fromServer)
	}
}

// pump copies src to dst, reporting every chunk before forwarding it, and
// closes both sides when either ends.
func (p *countingProxy) pump(pc *proxiedConn, src, dst net.Conn, seen func(chunk, marker []byte)) {
	defer p.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			seen(buf[:n], p.marker)
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil { // EOF, reset or closed: the pair ends either way
			pc.client.Close()
			pc.server.Close()
			return
		}
	}
}

func (pc *proxiedConn) fromClient(chunk, marker []byte) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.answered {
		pc.monitor = pc.isMonitorFlight(chunk)
		if !pc.monitor {
			pc.flights++
		}
		pc.answered = false
	}
	if pc.monitor {
		return
	}
	if !pc.marked {
		window := append(pc.tail, chunk...)
		pc.marked = bytes.Contains(window, marker)
		keep := min(len(window), len(marker)-1)
		pc.tail = append(pc.tail[:0], window[len(window)-keep:]...)
	}
}

func (pc *proxiedConn) fromServer(chunk, _ []byte) {
	if isCopyInResponse(chunk) {
		return
	}
	pc.mu.Lock()
	pc.answered = true
	pc.mu.Unlock()
}

// monitorTexts begin pgreplica's probes and its reads of write positions.
var monitorTexts = [][]byte{[]byte("SELECT pg_is_in_recovery()"), []byte("SELECT pg_current_wal_")}

// isMonitorFlight reports whether a flight that starts with chunk is the
// monitor's: its first message is a simple query of the monitor's ('Q',
// length, text), the Parse of one ('P', length, name, text; the name is
// remembered), or the Bind of a statement so prepared ('B', length,
// portal, name).
func (pc *proxiedConn) isMonitorFlight(chunk []byte) bool {
	if len(chunk) < 5 {
		return false
	}
	body := chunk[5:]
	isMonitorText := func(text []byte) bool {
		return bytes.HasPrefix(text, monitorTexts[0]) || bytes.HasPrefix(text, monitorTexts[1])
	}
	switch chunk[0] {
	case 'Q':
		return isMonitorText(body)
	case 'P':
		name, text, ok := bytes.Cut(body, []byte{0})
		if !ok || !isMonitorText(text) {
			return false
		}
		if pc.monitorStmts == nil {
			pc.monitorStmts = map[string]bool{}
		}
		pc.monitorStmts[string(name)] = true
		return true
	case 'B':
		_, rest, ok := bytes.Cut(body, []byte{0}) // the portal
		name, _, ok2 := bytes.Cut(rest, []byte{0})
		return ok && ok2 && len(name) > 0 && pc.monitorStmts[string(name)]
	}
	return false
}

// isCopyInResponse reports whether chunk is exactly one CopyInResponse
// message ('G', then its length, which counts itself but not the type).
func isCopyInResponse(chunk []byte) bool {
	if len(chunk) < 5 || chunk[0] != 'G' {
		return false
	}
	n := int(chunk[1])<<24 | int(chunk[2])<<16 | int(chunk[3])<<8 | int(chunk[4])
	return n+1 == len(chunk)
}

// flightCounts returns the flights so far of every connection, marked or
// not, keyed by connection.
func (p *countingProxy) flightCounts() map[*proxiedConn]int {
	p.mu.Lock()
	conns := append([]*proxiedConn(nil), p.conns...)
	p.mu.Unlock()
	out := make(map[*proxiedConn]int, len(conns))
	for _, pc := range conns {
		pc.mu.Lock()
		out[pc] = pc.flights
		pc.mu.Unlock()
	}
	return out
}

// roundTripsSince sums the flights made since before on the connections
// that are marked now (a connection opened since then counts in full: its
// start-up is part of the cost).
func (p *countingProxy) roundTripsSince(before map[*proxiedConn]int) int {
	total := 0
	for pc, n := range p.flightCounts() {
		pc.mu.Lock()
		marked := pc.marked
		pc.mu.Unlock()
		if marked {
			total += n - before[pc]
		}
	}
	return total
}

// usedSince returns the marked connections that made a flight since
// before (a connection opened since then included).
func (p *countingProxy) usedSince(before map[*proxiedConn]int) []*proxiedConn {
	var used []*proxiedConn
	for pc, n := range p.flightCounts() {
		pc.mu.Lock()
		marked := pc.marked
		pc.mu.Unlock()
		if marked && n > before[pc] {
			used = append(used, pc)
		}
	}
	return used
}

// Close stops accepting, cuts every connection and waits for the pumps.
func (p *countingProxy) Close() error {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.mu.Unlock()
	err := p.ln.Close()
	for _, pc := range conns {
		pc.client.Close()
		pc.server.Close()
	}
	p.wg.Wait()
	return err
}
