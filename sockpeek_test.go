package pgreplica

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
	switch runtime.GOOS {
	case "linux", "darwin", "dragonfly", "freebsd", "netbsd", "openbsd":
	default:
		t.Skip("no socket peek on " + runtime.GOOS)
	}
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
	s := &sockets{conns: []net.Conn{client}}

	if got := s.peek(); got != sockIdle {
		t.Fatalf("idle connection: %v, want sockIdle", got)
	}
	if _, err := server.Write([]byte("E")); err != nil {
		t.Fatal(err)
	}
	if got := await(s, sockPending); got != sockPending {
		t.Fatalf("after the server wrote: %v, want sockPending", got)
	}
	// Still there for the driver.
	b := make([]byte, 1)
	if n, err := client.Read(b); n != 1 || b[0] != 'E' {
		t.Fatalf("read after peek: %d %q %v", n, b, err)
	}
	server.Close()
	if got := await(s, sockClosed); got != sockClosed {
		t.Fatalf("after the server closed: %v, want sockClosed", got)
	}
	client.Close()
	if got := s.peek(); got != sockClosed {
		t.Fatalf("closed on our side: %v, want sockClosed", got)
	}
	if got := (&sockets{}).peek(); got != sockUnknown {
		t.Fatalf("no socket: %v, want sockUnknown", got)
	}
}

// await peeks until want or a second passed (loopback delivers in
// microseconds) and returns the last state.
func await(s *sockets, want sockState) sockState {
	deadline := time.Now().Add(time.Second)
	for {
		got := s.peek()
		if got == want || time.Now().After(deadline) {
			return got
		}
		time.Sleep(time.Millisecond)
	}
}
