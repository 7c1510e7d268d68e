package checker

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/lib/pq"
)

func TestConnectionLost(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	cases := []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("read (1,2): %w", io.ErrUnexpectedEOF), true},
		{fmt.Errorf("read: %w", driver.ErrBadConn), true},
		{fmt.Errorf("read: %w", refused), true},
		{fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{&pgconn.PgError{Code: "57P01", Message: "terminating connection due to unexpected postmaster exit"}, true},
		{&pgconn.PgError{Code: "57P03", Message: "the database system is starting up"}, true},
		{&pq.Error{Code: "08006"}, true},
		{&pgconn.PgError{Code: "42P01", Message: `relation "checker_kv" does not exist`}, false},
		{&pgconn.PgError{Code: "40001"}, false},
		{fmt.Errorf("read: %w", context.DeadlineExceeded), false},
		{errors.New("pgreplica: too many reads falling back to the primary"), false},
	}
	for _, c := range cases {
		if got := connectionLost(c.err); got != c.want {
			t.Errorf("connectionLost(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestKillError(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	restarts := []Restart{{Node: 1, Killed: at(1000), Started: at(1300)}}
	op := func(kind OpKind, start int, err error) *Op {
		return &Op{Kind: kind, Start: at(start), End: at(start + 5), Err: err}
	}
	lost := fmt.Errorf("read: %w", io.ErrUnexpectedEOF)
	cases := []struct {
		name string
		op   *Op
		want bool
	}{
		{"read that lost its connection at the kill", op(OpRead, 998, lost), true},
		{"read refused while down", op(OpRead, 1100, lost), true},
		{"dead pooled connection after the restart", op(OpRead, 1300+int(killErrorGrace/time.Millisecond)-10, lost), true},
		{"long after the restart", op(OpRead, 1300+int(killErrorGrace/time.Millisecond)+10, lost), false},
		{"before the kill", op(OpRead, 900, lost), false},
		{"a write", op(OpWrite, 1100, lost), false},
		{"not a connection error", op(OpRead, 1100, errors.New("pgreplica: no usable replica")), false},
		{"a successful read", op(OpRead, 1100, nil), false},
	}
	for _, c := range cases {
		if got := killError(c.op, restarts); got != c.want {
			t.Errorf("%s: killError = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestRestartRegressions(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	read := func(session, node, version, start int) Op {
		return Op{Session: session, Kind: OpRead, Key: Key{Owner: 9, N: 0}, Version: version, Node: node,
			Start: at(start), End: at(start + 1)}
	}
	write := Op{Session: 9, Kind: OpWrite, Key: Key{Owner: 9, N: 0}, Version: 3, Node: -1, Start: at(0), End: at(1)}
	h := History{Ops: []Op{
		write,
		read(0, 1, 3, 100), read(0, 1, 2, 2000), // node 1 went back across its restart
		read(1, 2, 3, 100), read(1, 1, 2, 2000), // another node's state: an ordinary violation
		read(2, 1, 3, 1100), read(2, 1, 2, 2000), // both after the kill
	}}
	for i := range h.Ops {
		h.Ops[i].Seq = i
	}
	rep := &Report{History: h, Violations: Check(h), Primary: 0,
		Faults: FaultStats{Restarts: []Restart{{Node: 1, Killed: at(1000), Started: at(1300), ReplayAtKill: 0x200, ReplayAtStart: 0x100}}}}
	if n := rep.Count(MonotonicRead); n != 3 {
		t.Fatalf("%d monotonic-read violations, want 3: %v", n, rep.Violations)
	}
	if n := rep.RestartRegressions(); n != 1 {
		t.Errorf("%d restart regressions, want 1 (session 0's)", n)
	}
	if n := rep.RestartsBehind(); n != 1 {
		t.Errorf("%d restarts behind, want 1", n)
	}
}

func TestParking(t *testing.T) {
	p := newParking()
	ctx := context.Background()
	deadline := time.Now().Add(time.Minute)
	if held, _ := p.wait(ctx, 0, deadline); held {
		t.Fatal("a session that was not parked was held")
	}
	type result struct {
		held     bool
		readOnly time.Time
		at       time.Time
	}
	done := make(chan result, 1)
	p.park(ctx, []int{0}, 0) // parks without waiting
	go func() {
		held, readOnly := p.wait(ctx, 0, deadline)
		done <- result{held, readOnly, time.Now()}
	}()
	p.park(ctx, []int{0}, 10*time.Second) // returns once session 0 is held
	p.mu.Lock()
	waiting := p.waiting[0]
	p.mu.Unlock()
	if !waiting {
		t.Fatal("park returned before the session was held")
	}
	goOn, readOnly := time.Now().Add(50*time.Millisecond), time.Now().Add(time.Second)
	p.release(0, goOn, readOnly)
	r := <-done
	if !r.held || !r.readOnly.Equal(readOnly) || r.at.Before(goOn) {
		t.Fatalf("got %+v, want held until %v, read-only until %v", r, goOn, readOnly)
	}
	if held, _ := p.wait(ctx, 0, deadline); held {
		t.Fatal("a released session was held again")
	}
}
