package main

import (
	"context"
	"database/sql"
	"fmt"
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
			_, err = integration.ServerCPU(pid)
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
	d, err := integration.ServerCPU(m.pids[i])
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
