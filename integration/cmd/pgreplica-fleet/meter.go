package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/pgreplica/pgreplica/integration"
)

// meterApp is the application_name of the meter's connections, which the
// connection count leaves out.
const meterApp = "pgreplica-fleet-meter"

// The meter's queries name fleet_meter, by which the statement count
// leaves them out; every other statement counts, pgreplica's monitor
// probes and position captures included.
const (
	statementsSQL = `SELECT coalesce(sum(calls), 0)::bigint AS fleet_meter
 FROM pg_stat_statements WHERE query NOT LIKE '%fleet_meter%'`
	byQuerySQL = `SELECT query AS fleet_meter, sum(calls)::bigint
 FROM pg_stat_statements WHERE query NOT LIKE '%fleet_meter%' GROUP BY query`
	connectionsSQL = `SELECT count(*) AS fleet_meter FROM pg_stat_activity
 WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()
 AND application_name <> '` + meterApp + `'`
)

// meterTimeout bounds each of the meter's queries.
const meterTimeout = 10 * time.Second

// meter reads what the servers have done so far: statements
// (pg_stat_statements) and CPU time (/proc) of every node, and their
// client connections, over one connection of its own to each node.
type meter struct {
	dbs  []*sql.DB
	pids []int // each node's postmaster; 0 when its CPU cannot be read
	pss  bool  // pg_stat_statements is there
}

func newMeter(ctx context.Context, cl *integration.Cluster, pss bool) (*meter, error) {
	m := &meter{pss: pss}
	for i := range cl.Len() {
		db, err := sql.Open("pgx", cl.NodeDSN(i)+"&application_name="+meterApp)
		if err != nil {
			m.close()
			return nil, err
		}
		db.SetMaxOpenConns(1)
		db.SetMaxIdleConns(1)
		m.dbs = append(m.dbs, db)
		if err := db.PingContext(ctx); err != nil {
			m.close()
			return nil, fmt.Errorf("meter: node %d: %w", i, err)
		}
		pid, err := cl.PID(i)
		if err == nil {
			_, err = serverCPU(pid)
		}
		if err != nil {
			logf("node %d's CPU time is not measured: %v", i, err)
			pid = 0
		}
		m.pids = append(m.pids, pid)
	}
	return m, nil
}

func (m *meter) close() {
	for _, db := range m.dbs {
		db.Close()
	}
}

// reading is one look at some nodes; a value is -1 when unknown (or when
// the node was not read).
type reading struct {
	at    time.Time
	stmts []int64
	cpu   []time.Duration
}

// read reads the statements and then the CPU time of nodes, with at
// after them, or with cpuFirst at, the CPU times and then the
// statements. A window opens with the first and closes with the second,
// so that the meter's queries fall outside its CPU window.
func (m *meter) read(ctx context.Context, nodes []int, cpuFirst bool) (reading, error) {
	r := reading{stmts: make([]int64, len(m.dbs)), cpu: make([]time.Duration, len(m.dbs))}
	for i := range r.stmts {
		r.stmts[i], r.cpu[i] = -1, -1
	}
	stmts := func() error {
		for _, i := range nodes {
			n, err := m.statements(ctx, i)
			if err != nil {
				return err
			}
			r.stmts[i] = n
		}
		return nil
	}
	cpu := func() {
		for _, i := range nodes {
			r.cpu[i] = m.cpu(i)
		}
	}
	if cpuFirst {
		r.at = time.Now()
		cpu()
		return r, stmts()
	}
	err := stmts()
	cpu()
	r.at = time.Now()
	return r, err
}

// statements returns the calls so far on node i, or -1 without
// pg_stat_statements.
func (m *meter) statements(ctx context.Context, i int) (int64, error) {
	if !m.pss {
		return -1, nil
	}
	ctx, cancel := context.WithTimeout(ctx, meterTimeout)
	defer cancel()
	var n int64
	if err := m.dbs[i].QueryRowContext(ctx, statementsSQL).Scan(&n); err != nil {
		return 0, fmt.Errorf("meter: statements of node %d: %w", i, err)
	}
	return n, nil
}

// byQuery returns the calls so far on node i of each statement, by its
// normalised text, or nil without pg_stat_statements.
func (m *meter) byQuery(ctx context.Context, i int) (map[string]int64, error) {
	if !m.pss {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, meterTimeout)
	defer cancel()
	rows, err := m.dbs[i].QueryContext(ctx, byQuerySQL)
	if err != nil {
		return nil, fmt.Errorf("meter: statements of node %d: %w", i, err)
	}
	defer rows.Close()
	calls := map[string]int64{}
	for rows.Next() {
		var q string
		var n int64
		if err := rows.Scan(&q, &n); err != nil {
			return nil, err
		}
		calls[q] = n
	}
	return calls, rows.Err()
}

// cpu returns node i's CPU time so far, or -1.
func (m *meter) cpu(i int) time.Duration {
	if m.pids[i] == 0 {
		return -1
	}
	d, err := serverCPU(m.pids[i])
	if err != nil {
		return -1
	}
	return d
}

// connections returns the client connections of every node, the meter's
// own left out.
func (m *meter) connections(ctx context.Context) ([]int, error) {
	ctx, cancel := context.WithTimeout(ctx, meterTimeout)
	defer cancel()
	conns := make([]int, len(m.dbs))
	for i, db := range m.dbs {
		if err := db.QueryRowContext(ctx, connectionsSQL).Scan(&conns[i]); err != nil {
			return nil, fmt.Errorf("meter: connections of node %d: %w", i, err)
		}
	}
	return conns, nil
}

// userHZ is the unit of the times in /proc/<pid>/stat (USER_HZ).
const userHZ = 100

// serverCPU returns the CPU time a server has used so far: its postmaster
// pm, every live process whose parent pm is (backends, WAL senders and
// receiver, startup, checkpointer, …) and, through pm's cutime and
// cstime, the children pm has reaped. A live process's own time is read
// from /proc/<pid>/schedstat (ns), else from its utime and stime (ticks).
// Linux only: elsewhere it fails.
func serverCPU(pm int) (time.Duration, error) {
	root, err := readProc(pm)
	if err != nil {
		return 0, err
	}
	total := root.own + root.reaped
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == pm {
			continue
		}
		p, err := readProc(pid)
		if err != nil || p.parent != pm {
			continue // gone meanwhile, or not the server's
		}
		total += p.own + p.reaped
	}
	return total, nil
}

// procCPU is what /proc says of one process's CPU time.
type procCPU struct {
	parent int
	own    time.Duration
	reaped time.Duration // children exited and waited for
}

func readProc(pid int) (procCPU, error) {
	dir := "/proc/" + strconv.Itoa(pid)
	b, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return procCPU{}, err
	}
	// After the command name, in parentheses, field 3 of proc(5) (the
	// state) comes first: field k is f[k-3].
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procCPU{}, errors.New(dir + "/stat: no command name")
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 17-2 {
		return procCPU{}, fmt.Errorf("%s/stat: %d fields", dir, len(f)+2)
	}
	n := func(k int) int64 {
		v, _ := strconv.ParseInt(string(f[k-3]), 10, 64)
		return v
	}
	ticks := func(a, b int) time.Duration { return time.Duration(n(a)+n(b)) * time.Second / userHZ }
	p := procCPU{parent: int(n(4)), own: ticks(14, 15), reaped: ticks(16, 17)}
	if b, err := os.ReadFile(dir + "/schedstat"); err == nil {
		if ns := bytes.Fields(b); len(ns) > 0 {
			if v, err := strconv.ParseInt(string(ns[0]), 10, 64); err == nil {
				p.own = time.Duration(v)
			}
		}
	}
	return p, nil
}
