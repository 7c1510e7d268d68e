package prober

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica/internal/probe"
)

// fakeServer answers the prober's two queries as a server would for a
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

// deniedError stands in for the root's error when the role may not use
// a function the router needs (Config.Denied).
type deniedError struct {
	user string
	fns  probe.Fn
}

func (e *deniedError) Error() string { return "denied " + e.fns.Names() + " to " + e.user }

// testConfig is a prober's Config on srv.
func testConfig(srv *fakeServer) Config {
	return Config{Connector: fakeConnector{srv}, Interval: time.Hour,
		Denied: func(user string, fns probe.Fn) error { return &deniedError{user, fns} }}
}

// probeWith probes srv once with a prober of its own, as the loop does,
// and closes the probe connection.
func probeWith(t *testing.T, srv *fakeServer) *Status {
	t.Helper()
	p := New(Key{}, testConfig(srv))
	st := p.probe(context.Background())
	p.closeConn()
	return st
}

// TestProbeSeesHiddenReplicationState: without pg_read_all_stats the WAL
// receiver runs but its state is hidden; the probe says so instead of
// "no receiver".
func TestProbeSeesHiddenReplicationState(t *testing.T) {
	st := probeWith(t, &fakeServer{user: "app", row: replicaSeenByApp})
	if st.Err != nil {
		t.Fatal(st.Err)
	}
	if !st.StatsHidden || !st.ReceiverHidden || st.Receiver != "" || st.User != "app" {
		t.Errorf("hidden replica: statsHidden=%v receiverHidden=%v receiver=%q user=%q", st.StatsHidden, st.ReceiverHidden, st.Receiver, st.User)
	}
	st = probeWith(t, &fakeServer{user: "mon", row: replicaSeenByMonitor})
	if st.Err != nil || st.StatsHidden || st.ReceiverHidden || st.Receiver != "streaming" || st.AppName != "r1" {
		t.Errorf("visible replica: %+v", st)
	}
	// No receiver at all is "no receiver" even for a plain role.
	none := append([]driver.Value(nil), replicaSeenByApp...)
	none[7] = ""
	if st = probeWith(t, &fakeServer{user: "app", row: none}); st.ReceiverHidden || st.Receiver != "" {
		t.Errorf("no receiver: receiverHidden=%v receiver=%q", st.ReceiverHidden, st.Receiver)
	}
}

// TestProbeDoesWithoutOptionalFunctions: a function revoked from the role
// leaves the probe (with a fallback), not the host; one the router needs
// makes the probe fail with Config.Denied's error for it alone, without
// probing.
func TestProbeDoesWithoutOptionalFunctions(t *testing.T) {
	optional := probe.FnControlCheckpoint | probe.FnWalfileName | probe.FnReplayPaused | probe.FnReceiveLSN | probe.FnWalReceiver | probe.FnReplication | probe.FnSetting
	srv := &fakeServer{user: "app", denied: optional, row: replicaSeenByApp}
	st := probeWith(t, srv)
	if st.Err != nil {
		t.Fatalf("probe with optional functions denied: %v (queries %q)", st.Err, srv.queries)
	}
	if st.Role != Replica || st.Denied != optional || !st.ReceiverHidden {
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
	var denied *deniedError
	if !errors.As(st.Err, &denied) || denied.user != "App" || denied.fns != probe.FnControlSystem {
		t.Fatalf("probe with pg_control_system() denied: err %v, want Config.Denied's for pg_control_system() alone", st.Err)
	}
	if len(srv.queries) != 1 {
		t.Errorf("ran %d queries, want only the privilege check: %q", len(srv.queries), srv.queries)
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
	p := New(Key{}, testConfig(srv))
	defer p.closeConn()
	run := func() (*Status, []string) {
		t.Helper()
		sent := len(srv.queries)
		st := p.probe(context.Background())
		if st.Err != nil {
			t.Fatal(st.Err)
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
		if st.Sysid != 7 || st.SyncStates["r1"] != "sync" {
			t.Fatalf("light probe %d: sysid %d, standbys %v; want those of the full probe", i, st.Sysid, st.SyncStates)
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
	if st.Role != Replica || st.SyncStates != nil {
		t.Errorf("after the role changed: role %v, standbys %v", st.Role, st.SyncStates)
	}
}
