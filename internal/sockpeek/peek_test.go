package sockpeek

import (
	"net"
	"runtime"
	"testing"
	"time"
)

// TestPeekIdleSocket: a look at an idle connection's socket tells a live
// one from one the server closed or wrote to (a terminated backend sends
// its FATAL error, then closes), and leaves pending bytes in place.
func TestPeekIdleSocket(t *testing.T) {
	skipWithoutPeek(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server := <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	defer server.Close()

	if got := Peek(client); got != Idle {
		t.Fatalf("idle connection: %v, want Idle", got)
	}
	// The pool looks before every write: a Peeker looks without
	// allocating.
	pk := NewPeeker(client)
	if n := testing.AllocsPerRun(100, func() {
		if pk.Peek() != Idle {
			t.Fatal("idle connection: not Idle through a Peeker")
		}
	}); n != 0 {
		t.Errorf("a Peeker's look allocates %v times, want 0", n)
	}
	if _, err := server.Write([]byte("E")); err != nil {
		t.Fatal(err)
	}
	if got := await(client, Pending); got != Pending {
		t.Fatalf("after the server wrote: %v, want Pending", got)
	}
	// Still there for the driver.
	b := make([]byte, 1)
	if n, err := client.Read(b); n != 1 || b[0] != 'E' {
		t.Fatalf("read after peek: %d %q %v", n, b, err)
	}
	server.Close()
	if got := await(client, Closed); got != Closed {
		t.Fatalf("after the server closed: %v, want Closed", got)
	}
	client.Close()
	if got := Peek(client); got != Closed {
		t.Fatalf("closed on our side: %v, want Closed", got)
	}
	a, b2 := net.Pipe() // no file descriptor to look at
	defer a.Close()
	defer b2.Close()
	if got := Peek(a); got != Unknown {
		t.Fatalf("a pipe: %v, want Unknown", got)
	}
}

// await peeks until want or a second passed (loopback delivers in
// microseconds) and returns the last state.
func await(c net.Conn, want State) State {
	deadline := time.Now().Add(time.Second)
	for {
		got := Peek(c)
		if got == want || time.Now().After(deadline) {
			return got
		}
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkPeek: what one look at an idle loopback connection costs (the
// system call a read skips on a connection that just answered).
func BenchmarkPeek(b *testing.B) {
	skipWithoutPeek(b)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			defer c.Close()
			var buf [1]byte
			c.Read(buf[:]) // until the client closes
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	pk := NewPeeker(c)
	for b.Loop() {
		if pk.Peek() != Idle {
			b.Fatal("the idle connection is not Idle")
		}
	}
}

// skipWithoutPeek skips where Peek cannot look at a socket.
func skipWithoutPeek(tb testing.TB) {
	tb.Helper()
	switch runtime.GOOS {
	case "linux", "darwin", "dragonfly", "freebsd", "netbsd", "openbsd":
	default:
		tb.Skip("no socket peek on " + runtime.GOOS)
	}
}
