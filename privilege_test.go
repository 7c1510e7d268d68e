package pgreplica

import (
	"database/sql/driver"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica/internal/probe"
	"github.com/pgreplica/pgreplica/internal/prober"
)

// TestDeniedError: a probe's error for a role that may not execute a
// function the router needs matches ErrInsufficientPrivilege, not
// ErrBadConfig, and names the function and its GRANT; it is the error
// the nodes' probers are made with.
func TestDeniedError(t *testing.T) {
	n := &node{}
	for _, err := range []error{deniedError("App", probe.FnControlSystem), n.proberConfig().Denied("App", probe.FnControlSystem)} {
		if !errors.Is(err, ErrInsufficientPrivilege) || errors.Is(err, ErrBadConfig) {
			t.Errorf("err %v: want ErrInsufficientPrivilege only", err)
		}
		if msg := err.Error(); !strings.Contains(msg, `GRANT EXECUTE ON FUNCTION pg_control_system() TO "App"`) {
			t.Errorf("message %q should name the required function and the GRANT", msg)
		}
	}
}

// TestPrivilegeErr: a host whose required function is denied fails
// Connect and Ping; a plain role that cannot see replication state does
// not. Nodes() tells hidden state apart from its absence.
func TestPrivilegeErr(t *testing.T) {
	// What the probes of a plain role and of one with pg_read_all_stats
	// read (internal/prober's tests read them from a server's rows).
	server := probe.Server{Sysid: 7}
	primarySeenByApp := prober.Status{Role: prober.Primary, LSN: 0x3000100, Timeline: 1, Sysid: 7, Server: server,
		StatsHidden: true, User: "app"}
	replicaSeenByApp := prober.Status{Role: prober.Replica, LSN: 0x3000000, Receive: 0x3000100, Timeline: 1, Sysid: 7, Server: server,
		StatsHidden: true, ReceiverHidden: true, User: "app"}
	replicaSeenByMonitor := prober.Status{Role: prober.Replica, LSN: 0x3000000, Receive: 0x3000100, Timeline: 1, Sysid: 7, Server: server,
		Receiver: "streaming", AppName: "r1", User: "app"}
	build := func(primary, replica prober.Status) *Connector {
		c, err := newConnector(Config{Hosts: []Host{{Addr: "127.0.0.1", Port: 1}, {Addr: "127.0.0.1", Port: 2}}},
			func(*Config, Host, string) (driver.Connector, error) {
				return refusingConnector{errors.New("unused")}, nil
			})
		if err != nil {
			t.Fatal(err)
		}
		for i, n := range c.nodeList() {
			st := primary
			if i == 1 {
				st = replica
			}
			now := time.Now()
			st.At, st.Sent, st.ConnSince, st.Seq = now, now, now, 1
			c.mon.apply(n, &st)
		}
		return c
	}
	c := build(primarySeenByApp, replicaSeenByApp)
	if err := c.privilegeErr(c.topo.Load()); err != nil {
		t.Errorf("a plain role needs nothing more: %v", err)
	}
	ns := c.Nodes()
	if ns[1].Receiver != StatusNeedsMonitor || ns[1].SyncState != StatusNeedsMonitor || !ns[1].Reads {
		t.Errorf("replica as a plain role sees it: %+v", ns[1])
	}
	if ns[0].SyncState != "" || ns[0].Err != nil {
		t.Errorf("primary: %+v", ns[0])
	}

	primaryVisible := primarySeenByApp
	primaryVisible.SyncStates, primaryVisible.StatsHidden = map[string]string{"r1": "sync"}, false
	c = build(primaryVisible, replicaSeenByMonitor)
	if err := c.privilegeErr(c.topo.Load()); err != nil {
		t.Errorf("with pg_read_all_stats: %v", err)
	}
	if ns := c.Nodes(); ns[1].SyncState != "sync" || !ns[1].Reads {
		t.Errorf("a visible sync standby serves reads like any replica: %+v", ns[1])
	}

	denied := prober.Status{Err: deniedError("app", probe.FnControlSystem)}
	c = build(denied, denied)
	err := c.privilegeErr(c.topo.Load())
	if !errors.Is(err, ErrInsufficientPrivilege) || errors.Is(err, ErrBadConfig) {
		t.Fatalf("pg_control_system() denied: %v", err)
	}
	if ns := c.Nodes(); !strings.HasPrefix(ns[0].Why, "answers, but the role lacks privileges") {
		t.Errorf("denied host explained as %q", ns[0].Why)
	}
}
