package pgreplica

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/pgreplica/pgreplica/internal/probe"
)

// fakeServer answers the monitor's two queries as a server would for a
// role: the privilege check from denied, the probe from row.
type fakeServer struct {
	denied  probe.Fn
	user    string
	row     []driver.Value // the probe's answer
	queries []string
}

func (f *fakeServer) Prepare(string) (driver.Stmt, error) { return nil, errors.New("unused") }
func (f *fakeServer) Close() error                        { return nil }
func (f *fakeServer) Begin() (driver.Tx, error)           { return nil, errors.New("unused") }

func (f *fakeServer) QueryContext(_ context.Context, q string, _ []driver.NamedValue) (driver.Rows, error) {
	f.queries = append(f.queries, q)
	if q == probe.PrivilegeSQL {
		row := make([]driver.Value, probe.PrivilegeColumns)
		for i := range probe.NumFns {
			row[i] = f.denied&(1<<i) != 0
		}
		row[probe.NumFns] = f.user
		return &fakeRows{row: row}, nil
	}
	for i := range probe.NumFns {
		// A denied function in the probe fails it, as on a server.
		name := probe.Fn(1 << i).Names()
		if f.denied&(1<<i) != 0 && strings.Contains(q, strings.TrimSuffix(name, "(pg_lsn)")) {
			return nil, errors.New("permission denied for function " + name)
		}
	}
	return &fakeRows{row: f.row}, nil
}

type fakeRows struct {
	row  []driver.Value
	done bool
}

func (r *fakeRows) Columns() []string { return make([]string, len(r.row)) }
func (r *fakeRows) Close() error      { return nil }
func (r *fakeRows) Next(dest []driver.Value) error {
	if r.done {
		return io.EOF
	}
	r.done = true
	copy(dest, r.row)
	return nil
}

type fakeConnector struct{ srv *fakeServer }

func (c fakeConnector) Connect(context.Context) (driver.Conn, error) { return c.srv, nil }
func (c fakeConnector) Driver() driver.Driver                        { return nil }

// Probe answers: a replica whose WAL receiver runs, as a role with and
// without pg_read_all_stats sees it, and a primary with one sync standby.
var (
	replicaSeenByMonitor = []driver.Value{true, "0/3000000", "0/3000100", false, int64(1), "7", false, "streaming r1", "0", true}
	replicaSeenByApp     = []driver.Value{true, "0/3000000", "0/3000100", false, int64(1), "7", false, " ", "0", false}
	primarySeenByApp     = []driver.Value{false, "0/3000100", "", false, int64(1), "7", false, "", "", false}
)

func probeWith(t *testing.T, srv *fakeServer) *nodeStatus {
	t.Helper()
	return probeNode(&node{name: "h:5432", host: Host{Addr: "127.0.0.1"}, inner: fakeConnector{srv}})
}

// probeNode probes n once with a prober of its own, as the monitor does,
// and closes the probe connection.
func probeNode(n *node) *nodeStatus {
	p := newProber(n.inner, false)
	st := p.probe(context.Background())
	if p.conn != nil {
		p.conn.Close()
	}
	if st.err == nil {
		st.server = n.noteServer(st.id)
	}
	return st
}

// TestProbeSeesHiddenReplicationState: without pg_read_all_stats the WAL
// receiver runs but its state is hidden; the probe says so instead of
// "no receiver".
func TestProbeSeesHiddenReplicationState(t *testing.T) {
	st := probeWith(t, &fakeServer{user: "app", row: replicaSeenByApp})
	if st.err != nil {
		t.Fatal(st.err)
	}
	if !st.statsHidden || !st.receiverHidden || st.receiver != "" || st.user != "app" {
		t.Errorf("hidden replica: statsHidden=%v receiverHidden=%v receiver=%q user=%q", st.statsHidden, st.receiverHidden, st.receiver, st.user)
	}
	st = probeWith(t, &fakeServer{user: "mon", row: replicaSeenByMonitor})
	if st.err != nil || st.statsHidden || st.receiverHidden || st.receiver != "streaming" || st.appName != "r1" {
		t.Errorf("visible replica: %+v", st)
	}
	// No receiver at all is "no receiver" even for a plain role.
	none := append([]driver.Value(nil), replicaSeenByApp...)
	none[7] = ""
	if st = probeWith(t, &fakeServer{user: "app", row: none}); st.receiverHidden || st.receiver != "" {
		t.Errorf("no receiver: receiverHidden=%v receiver=%q", st.receiverHidden, st.receiver)
	}
}

// TestProbeDoesWithoutOptionalFunctions: a function revoked from the role
// leaves the probe (with a fallback), not the host; one the router needs
// makes the probe fail with ErrInsufficientPrivilege, not as unreachable.
func TestProbeDoesWithoutOptionalFunctions(t *testing.T) {
	optional := probe.FnControlCheckpoint | probe.FnWalfileName | probe.FnReplayPaused | probe.FnReceiveLSN | probe.FnWalReceiver | probe.FnReplication | probe.FnSetting
	srv := &fakeServer{user: "app", denied: optional, row: replicaSeenByApp}
	st := probeWith(t, srv)
	if st.err != nil {
		t.Fatalf("probe with optional functions denied: %v (queries %q)", st.err, srv.queries)
	}
	if st.role != roleReplica || st.denied != optional || !st.receiverHidden {
		t.Errorf("status %+v", st)
	}
	q := probe.Query(optional, false)
	for _, f := range []string{"pg_control_checkpoint", "pg_walfile_name", "pg_is_wal_replay_paused", "pg_last_wal_receive_lsn",
		"pg_stat_wal_receiver", "pg_stat_replication", "current_setting"} {
		if strings.Contains(q, f) {
			t.Errorf("probe without %s still calls it:\n%s", f, q)
		}
	}
	for _, f := range []string{"pg_is_in_recovery", "pg_last_wal_replay_lsn", "pg_current_wal_flush_lsn", "pg_control_system", "pg_has_role"} {
		if !strings.Contains(q, f) {
			t.Errorf("degraded probe lost %s:\n%s", f, q)
		}
	}
	if probe.Query(0, false) != probe.FullSQL || probe.Query(0, true) != probe.LightSQL {
		t.Error("probe.FullSQL or probe.LightSQL is not probe.Query(0, …)")
	}

	srv = &fakeServer{user: "App", denied: probe.FnControlSystem | probe.FnReplayPaused, row: replicaSeenByApp}
	st = probeWith(t, srv)
	if !errors.Is(st.err, ErrInsufficientPrivilege) || errors.Is(st.err, ErrBadConfig) {
		t.Fatalf("probe with pg_control_system() denied: err %v, want ErrInsufficientPrivilege only", st.err)
	}
	if msg := st.err.Error(); !strings.Contains(msg, `GRANT EXECUTE ON FUNCTION pg_control_system() TO "App"`) ||
		strings.Contains(msg, "pg_is_wal_replay_paused") {
		t.Errorf("message %q should name the required function and the GRANT only", msg)
	}
	if len(srv.queries) != 1 {
		t.Errorf("ran %d queries, want only the privilege check: %q", len(srv.queries), srv.queries)
	}
}

// TestPrivilegeErr: ExcludeSyncStandby fails at Connect and Ping when the
// primary hides sync_state; so does a host whose required function is
// denied. Nodes() tells hidden state apart from its absence.
func TestPrivilegeErr(t *testing.T) {
	build := func(exclude bool, primary, replica []driver.Value, denied probe.Fn) *Connector {
		c, err := newConnector(Config{Hosts: []Host{{Addr: "127.0.0.1", Port: 1}, {Addr: "127.0.0.1", Port: 2}}, ExcludeSyncStandby: exclude},
			func(_ *Config, h Host, _ string) (driver.Connector, error) {
				row := primary
				if h.Port == 2 {
					row = replica
				}
				return fakeConnector{&fakeServer{user: "app", row: row, denied: denied}}, nil
			})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range c.nodeList() {
			c.mon.applyStatus(n, probeNode(n))
		}
		c.mon.publish(buildTopology(c.nodeList(), &c.primaryLSNs, exclude))
		return c
	}
	c := build(true, primarySeenByApp, replicaSeenByApp, 0)
	err := c.privilegeErr(c.topo.Load())
	if !errors.Is(err, ErrInsufficientPrivilege) || !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "GRANT pg_monitor TO app") {
		t.Fatalf("ExcludeSyncStandby without pg_read_all_stats: %v", err)
	}
	ns := c.Nodes()
	if ns[1].Receiver != StatusNeedsMonitor || ns[1].SyncState != StatusNeedsMonitor || !ns[1].Reads || !strings.Contains(ns[1].Why, "ExcludeSyncStandby") {
		t.Errorf("replica as a plain role sees it: %+v", ns[1])
	}
	if ns[0].SyncState != "" || ns[0].Err != nil {
		t.Errorf("primary: %+v", ns[0])
	}

	if c := build(false, primarySeenByApp, replicaSeenByApp, 0); c.privilegeErr(c.topo.Load()) != nil {
		t.Errorf("without ExcludeSyncStandby a plain role needs nothing more: %v", c.privilegeErr(c.topo.Load()))
	}
	primaryVisible := append([]driver.Value(nil), primarySeenByApp...)
	primaryVisible[7], primaryVisible[9] = "r1=sync", true
	c = build(true, primaryVisible, replicaSeenByMonitor, 0)
	if err := c.privilegeErr(c.topo.Load()); err != nil {
		t.Errorf("with pg_read_all_stats: %v", err)
	}
	if ns := c.Nodes(); ns[1].SyncState != "sync" || ns[1].Reads {
		t.Errorf("visible sync standby with ExcludeSyncStandby: %+v", ns[1])
	}

	c = build(false, primarySeenByApp, replicaSeenByApp, probe.FnControlSystem)
	err = c.privilegeErr(c.topo.Load())
	if !errors.Is(err, ErrInsufficientPrivilege) || errors.Is(err, ErrBadConfig) {
		t.Fatalf("pg_control_system() denied: %v", err)
	}
	if ns := c.Nodes(); !strings.HasPrefix(ns[0].Why, "answers, but the role lacks privileges") {
		t.Errorf("denied host explained as %q", ns[0].Why)
	}
}

// TestLightProbes: between full probes, a probe leaves out the system
// identifier and the primary's standbys (their cost grows with the
// server's backends) and keeps them from the last answer; one that finds
// another role asks everything again at once.
func TestLightProbes(t *testing.T) {
	primary := append([]driver.Value(nil), primarySeenByApp...)
	primary[7] = "r1=sync"
	srv := &fakeServer{user: "mon", row: primary}
	p := newProber(fakeConnector{srv}, false)
	defer func() {
		if p.conn != nil {
			p.conn.Close()
		}
	}()
	run := func() (*nodeStatus, []string) {
		t.Helper()
		sent := len(srv.queries)
		st := p.probe(context.Background())
		if st.err != nil {
			t.Fatal(st.err)
		}
		p.last = st
		return st, srv.queries[sent:]
	}
	if _, q := run(); q[len(q)-1] != probe.FullSQL {
		t.Fatalf("first probe sent %q, want the full probe", q)
	}
	srv.row = append([]driver.Value(nil), primary...)
	srv.row[5], srv.row[7] = nil, "" // what a light probe reads
	for i := 1; i < fullProbeEvery; i++ {
		st, q := run()
		if len(q) != 1 || q[0] != probe.LightSQL {
			t.Fatalf("probe %d sent %q, want the light probe", i, q)
		}
		if st.sysid != 7 || st.syncStates["r1"] != "sync" {
			t.Fatalf("light probe %d: sysid %d, standbys %v; want those of the full probe", i, st.sysid, st.syncStates)
		}
	}
	srv.row = primary
	if _, q := run(); len(q) != 1 || q[0] != probe.FullSQL {
		t.Fatalf("probe %d sent %q, want the full probe", fullProbeEvery, q)
	}
	run() // light
	srv.row = append([]driver.Value(nil), replicaSeenByMonitor...)
	st, q := run()
	if len(q) != 2 || q[0] != probe.LightSQL || q[1] != probe.FullSQL {
		t.Fatalf("a light probe that found a replica where the primary was sent %q, want it followed by the full probe", q)
	}
	if st.role != roleReplica || st.syncStates != nil {
		t.Errorf("after the role changed: role %v, standbys %v", st.role, st.syncStates)
	}
}
