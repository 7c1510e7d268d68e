package main

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pgreplica/pgreplica"
)

// conflictsSQL sums every confl_* counter of pg_stat_database_conflicts for
// the current database: queries a standby cancelled because replay needed
// what they were using. Summing over the row's JSON keys keeps working when
// a release adds a counter (PostgreSQL 16 added confl_active_logicalslot).
const conflictsSQL = `SELECT COALESCE(sum(v.value::bigint), 0)::bigint
FROM pg_stat_database_conflicts c, json_each_text(row_to_json(c)) v
WHERE c.datname = current_database() AND v.key LIKE 'confl\_%'`

// conflictProbe reads the conflict counters of each host over a connection
// of its own: the counters are per server, so the query must reach one
// named host, which the routing driver deliberately does not offer.
type conflictProbe struct {
	cfg pgreplica.Config
	dbs map[string]*sql.DB // by host:port, opened on first use
}

func newConflictProbe(cfg pgreplica.Config) *conflictProbe {
	return &conflictProbe{cfg: cfg, dbs: map[string]*sql.DB{}}
}

// conflictCount is one host's answer: ok with n, or err, or neither when
// the host was not asked (it is unreachable, as its row already says).
type conflictCount struct {
	n   int64
	ok  bool
	err error
}

// read asks every reachable host in parallel, each bounded by timeout.
func (p *conflictProbe) read(ctx context.Context, nodes []pgreplica.NodeStatus, timeout time.Duration) []conflictCount {
	out := make([]conflictCount, len(nodes))
	var wg sync.WaitGroup
	for i, ns := range nodes {
		if ns.Err != nil || ns.Role == "unknown" {
			continue
		}
		db, err := p.db(ns)
		if err != nil {
			out[i].err = err
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			qctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			if err := db.QueryRowContext(qctx, conflictsSQL).Scan(&out[i].n); err != nil {
				out[i].err = fmt.Errorf("reading pg_stat_database_conflicts: %w", err)
				return
			}
			out[i].ok = true
		}()
	}
	wg.Wait()
	return out
}

// db returns the single-host pool of the server ns stands for, opening
// it on first use: at its Address, the one address of its name when the
// name has several (TLS then verifies that address, not the name).
func (p *conflictProbe) db(ns pgreplica.NodeStatus) (*sql.DB, error) {
	host, port, err := net.SplitHostPort(ns.Address)
	if err != nil {
		return nil, fmt.Errorf("host %s: %w", ns.Addr, err)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("host %s: %w", ns.Addr, err)
	}
	h := pgreplica.Host{Addr: host, Port: uint16(n)}
	key := ns.Address
	if db := p.dbs[key]; db != nil {
		return db, nil
	}
	name := "pgx"
	if p.cfg.Driver == pgreplica.DriverPq {
		name = "postgres" // lib/pq's registered name
	}
	db, err := sql.Open(name, singleHostDSN(p.cfg, h))
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", key, err)
	}
	db.SetMaxOpenConns(1)
	p.dbs[key] = db
	return db, nil
}

func (p *conflictProbe) close() {
	for _, db := range p.dbs {
		db.Close()
	}
}

// singleHostDSN is a keyword/value DSN naming host h alone with cfg's
// credentials, database and libpq parameters (ParseDSN already removed
// pgreplica's own options). Every value is single-quoted with ' and \
// escaped, which pgx and lib/pq both read back verbatim.
func singleHostDSN(cfg pgreplica.Config, h pgreplica.Host) string {
	kv := map[string]string{}
	for k, v := range cfg.Params {
		kv[k] = v
	}
	kv["host"] = h.Addr
	if h.Port != 0 {
		kv["port"] = strconv.Itoa(int(h.Port))
	}
	for k, v := range map[string]string{"user": cfg.User, "password": cfg.Password, "dbname": cfg.Database} {
		if v != "" {
			kv[k] = v
		}
	}
	if kv["application_name"] == "" {
		kv["application_name"] = "pgreplica-status"
	}
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k + "='")
		v := kv[k]
		for i := 0; i < len(v); i++ {
			if v[i] == '\'' || v[i] == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(v[i])
		}
		b.WriteByte('\'')
	}
	return b.String()
}
