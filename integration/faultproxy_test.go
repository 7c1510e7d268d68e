package integration_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica/integration"
)

// echoServer answers every line with the same line, until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// echoClient is one connection through the proxy.
type echoClient struct {
	c net.Conn
	r *bufio.Reader
}

func dialEcho(t *testing.T, addr string) *echoClient {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &echoClient{c, bufio.NewReader(c)}
}

// roundTrip sends a line and returns how long its echo took, or the error
// that ended the wait (bounded by timeout).
func (e *echoClient) roundTrip(timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	_ = e.c.SetDeadline(start.Add(timeout))
	if _, err := e.c.Write([]byte("ping\n")); err != nil {
		return 0, err
	}
	line, err := e.r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	if line != "ping\n" {
		return 0, errors.New("echo mismatch: " + line)
	}
	return time.Since(start), nil
}

// TestFaultProxy: each fault does what it says to an open connection and
// to a new one, Heal undoes it, and Close leaves no goroutine behind. It
// needs no PostgreSQL.
func TestFaultProxy(t *testing.T) {
	before := runtime.NumGoroutine()
	echo := echoServer(t)
	p, err := integration.NewFaultProxy(echo)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := dialEcho(t, p.Addr())
	if _, err := c.roundTrip(5 * time.Second); err != nil {
		t.Fatalf("clean link: %v", err)
	}

	t.Run("latency", func(t *testing.T) {
		const d = 100 * time.Millisecond
		if err := p.Latency(d); err != nil {
			t.Fatal(err)
		}
		for _, cl := range []*echoClient{c, dialEcho(t, p.Addr())} {
			rtt, err := cl.roundTrip(10 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if rtt < 2*d {
				t.Errorf("round trip %v with %v each way, want at least %v", rtt, d, 2*d)
			}
		}
		if err := p.Heal(); err != nil {
			t.Fatal(err)
		}
		if rtt, err := c.roundTrip(5 * time.Second); err != nil || rtt >= d {
			t.Errorf("after Heal: round trip %v, %v; want under %v", rtt, err, d)
		}
	})

	t.Run("one direction", func(t *testing.T) {
		const d = 100 * time.Millisecond
		if err := p.Latency(d, integration.ToClient); err != nil {
			t.Fatal(err)
		}
		rtt, err := c.roundTrip(10 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if rtt < d || rtt >= 2*d {
			t.Errorf("round trip %v with %v toward the client only, want in [%v, %v)", rtt, d, d, 2*d)
		}
		if err := p.Heal(); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("bandwidth", func(t *testing.T) {
		if err := p.Bandwidth(64, integration.ToClient); err != nil { // 64 KB/s
			t.Fatal(err)
		}
		cl := dialEcho(t, p.Addr())
		payload := make([]byte, 32<<10)
		for i := range payload {
			payload[i] = 'x'
		}
		payload[len(payload)-1] = '\n'
		start := time.Now()
		_ = cl.c.SetDeadline(start.Add(20 * time.Second))
		go func() { _, _ = cl.c.Write(payload) }()
		if _, err := io.ReadFull(cl.r, make([]byte, len(payload))); err != nil {
			t.Fatal(err)
		}
		// 32 KB at 64 KB/s: half a second; the bound leaves room for the
		// toxic's first chunk going through at once.
		if took := time.Since(start); took < 300*time.Millisecond {
			t.Errorf("32 KB at 64 KB/s took %v, want about 500ms", took)
		}
		if err := p.Heal(); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("blackhole", func(t *testing.T) {
		cl := dialEcho(t, p.Addr())
		if err := p.Blackhole(); err != nil {
			t.Fatal(err)
		}
		for _, e := range []*echoClient{cl, dialEcho(t, p.Addr())} {
			_, err := e.roundTrip(300 * time.Millisecond)
			if ne := net.Error(nil); !errors.As(err, &ne) || !ne.Timeout() {
				t.Errorf("black-holed round trip: %v, want a timeout", err)
			}
		}
		if err := p.Heal(); err != nil {
			t.Fatal(err)
		}
		// A connection that lived through it is closed; a new one works.
		if _, err := cl.roundTrip(5 * time.Second); err == nil {
			t.Errorf("a black-holed connection still works after Heal")
		}
		if _, err := dialEcho(t, p.Addr()).roundTrip(5 * time.Second); err != nil {
			t.Errorf("new connection after Heal: %v", err)
		}
	})

	t.Run("reset", func(t *testing.T) {
		cl := dialEcho(t, p.Addr())
		if _, err := cl.roundTrip(5 * time.Second); err != nil {
			t.Fatal(err)
		}
		if err := p.Reset(); err != nil {
			t.Fatal(err)
		}
		for _, e := range []*echoClient{cl, dialEcho(t, p.Addr())} {
			if _, err := e.roundTrip(5 * time.Second); !errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("round trip through a reset link: %v, want connection reset by peer", err)
			}
		}
		if err := p.Heal(); err != nil {
			t.Fatal(err)
		}
		if _, err := dialEcho(t, p.Addr()).roundTrip(5 * time.Second); err != nil {
			t.Errorf("new connection after Heal: %v", err)
		}
	})

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if n := p.Conns(); n != 0 {
		t.Errorf("%d connections open after Close", n)
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Errorf("the proxy still accepts after Close")
	}
	// Goroutines of the proxy's links end once both ends are closed.
	c.c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before+3 { // the echo server's accept loop and its conns end with the test
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("goroutines: %d before, %d after Close\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond) // exiting goroutines are not awaitable from outside
	}
}
