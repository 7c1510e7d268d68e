package pgreplica

import (
	"context"
	"database/sql/driver"
	"errors"
	"net"
	"reflect"
	"sync"
	"time"

	"github.com/lib/pq"

	"github.com/pgreplica/pgreplica/internal/inner"
	"github.com/pgreplica/pgreplica/internal/sockpeek"
)

// lib/pq: its connector, which dials through socketDialer; its wire
// (genericWire, and pqWire for its process id); and the deadline watch
// its statements need (deadlineWatch).

// pqConnector is lib/pq's connector for a host's dsn; its error is
// lib/pq's rejection of dsn.
func pqConnector(cfg *Config, dsn, pin string) (driver.Connector, error) {
	c, err := pq.NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	c.Dialer(socketDialer{pin: pin, lookup: cfg.LookupFunc}) // lib/pq's default dialer, plus sockpeek.Note
	return c, nil
}

// socketDialer is lib/pq's default dialer (a zero net.Dialer) that records
// what it dials for the connection being made (see hostPool.close). A
// dialer pinned to one address of the host's name dials that address
// (lib/pq still verifies the name); one with a lookup resolves the name
// with it and dials its first answer that connects, as pgx does.
type socketDialer struct {
	d      net.Dialer
	pin    string
	lookup LookupFunc
}

func (s socketDialer) Dial(network, address string) (net.Conn, error) {
	return s.DialContext(context.Background(), network, address)
}

func (s socketDialer) DialTimeout(network, address string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return s.DialContext(ctx, network, address)
}

func (s socketDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	if s.pin != "" {
		address = pinnedAddr(s.pin, address)
	} else if host, _, err := net.SplitHostPort(address); err == nil && s.lookup != nil && isName(host) {
		return s.dialLookedUp(ctx, network, host, address)
	}
	c, err := s.d.DialContext(ctx, network, address)
	if err == nil {
		sockpeek.Note(ctx, c)
	}
	return c, err
}

// dialLookedUp dials the addresses s.lookup gives host in turn.
func (s socketDialer) dialLookedUp(ctx context.Context, network, host, address string) (net.Conn, error) {
	addrs, err := s.lookup(ctx, host)
	if err != nil {
		return nil, &net.DNSError{Err: err.Error(), Name: host, UnwrapErr: err}
	}
	var errs []error
	for _, a := range addrs {
		c, err := s.d.DialContext(ctx, network, pinnedAddr(a, address))
		if err == nil {
			sockpeek.Note(ctx, c)
			return c, nil
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil, &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}
	}
	return nil, errors.Join(errs...)
}

// genericWire assumes the worst of ErrBadConn.
type genericWire struct{}

func (genericWire) badConnMaySend() bool { return true }

// backendPID is not known: lib/pq keeps it to itself.
func (genericWire) backendPID() uint32 { return 0 }

// beginChecked costs two round trips: BEGIN, then the check.
func (genericWire) beginChecked(ctx context.Context, conn driver.Conn) (LSN, error) {
	if _, err := inner.Exec(ctx, conn, "BEGIN READ ONLY", nil); err != nil {
		return 0, err
	}
	replay, err := inner.QueryLSN(ctx, conn, replaySQL)
	return LSN(replay), err
}

// live looks at the socket only: lib/pq cannot hand over a message that
// arrived on an idle connection, and on one that is almost always the
// backend's FATAL termination, so pending bytes count as dead too (at
// worst a connection is replaced). Without a socket (a test double), the
// connection is taken as it is.
func (genericWire) live(socks *sockpeek.Sockets) bool {
	switch socks.Peek() {
	case sockpeek.Closed, sockpeek.Pending:
		return false
	}
	return true
}

// describe prepares and closes the inner driver's own statement: for
// lib/pq the round trip its Close would cost later anyway, and lib/pq's
// own errors (a CopyIn outside a transaction).
func (genericWire) describe(ctx context.Context, conn driver.Conn, query string) (int, error) {
	st, err := inner.Prepare(ctx, conn, query)
	if err != nil {
		return 0, err
	}
	n := st.NumInput()
	return n, st.Close()
}

// pqWire is the wire of a lib/pq connection: genericWire, plus the
// process id of its start-up message, which lib/pq keeps for cancel
// requests but does not export. It is read once per connection, by
// reflection: a lib/pq without the field reports 0 (unknown), and a
// pooler in front of it is then seen only as an endpoint.
type pqWire struct {
	genericWire
	pid uint32
}

// isPqConn reports whether c is a lib/pq connection.
func isPqConn(c driver.Conn) bool {
	t := reflect.TypeOf(c)
	return t != nil && t.Kind() == reflect.Pointer && t.Elem().PkgPath() == "github.com/lib/pq" && t.Elem().Name() == "conn"
}

func newPqWire(c driver.Conn) *pqWire {
	w := &pqWire{}
	if f := reflect.ValueOf(c).Elem().FieldByName("pid"); f.IsValid() && f.CanInt() {
		w.pid = uint32(f.Int())
	}
	return w
}

func (w *pqWire) backendPID() uint32 { return w.pid }

// deadlineWatch makes a statement on lib/pq give up once its context has
// ended. lib/pq cancels a statement by a cancel request that the server
// must read: a server that stopped answering (SIGSTOP, a hung VM, a
// stalled disk) never does, and lib/pq waits in its read forever, past
// any deadline. pgx sets deadlines on the socket itself and needs no
// watch. Once the context has ended and lib/pq has had grace to cancel
// the statement the usual way, the watch closes the connection's socket:
// the statement fails (a write's outcome is then unknown, as it is) and
// the connection is dropped.
type deadlineWatch struct {
	mu    sync.Mutex
	ended bool
	timer *time.Timer
	stop  func() bool
}

// watchDeadline arms a watch over a statement for ctx on the connection
// whose sockets are socks; nil when ctx never ends.
func watchDeadline(ctx context.Context, socks *sockpeek.Sockets, grace time.Duration) *deadlineWatch {
	if ctx.Done() == nil {
		return nil
	}
	w := &deadlineWatch{}
	w.stop = context.AfterFunc(ctx, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if !w.ended {
			w.timer = time.AfterFunc(grace, func() { socks.Close() })
		}
	})
	return w
}

// end disarms the watch: the statement is over. It is idempotent and safe
// on a nil watch.
func (w *deadlineWatch) end() {
	if w == nil {
		return
	}
	w.stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ended = true
	if w.timer != nil {
		w.timer.Stop()
	}
}
