package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/internal/clitext"
	"github.com/pgreplica/pgreplica/internal/tuning"
)

// dsnEnv names the environment variable status reads the DSN from when the
// command line gives none (keeps a password out of the process list).
const dsnEnv = "PGREPLICA_DSN"

// statusMonitorInterval is the topology poll interval status uses, busy
// or idle: faster than the driver's (250ms while statements run, 1s while
// idle) so that a short look already has several lag samples.
const statusMonitorInterval = 100 * time.Millisecond

type statusOptions struct {
	watch    bool
	interval time.Duration
	sample   time.Duration
	json     bool
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o statusOptions
	fs.BoolVar(&o.watch, "watch", false, "refresh in place every -interval until Ctrl-C")
	fs.DurationVar(&o.interval, "interval", time.Second, "refresh interval of -watch")
	fs.DurationVar(&o.sample, "sample", time.Second, "without -watch, observe this long before printing, so that lag in time has history")
	fs.BoolVar(&o.json, "json", false, "print a JSON array of node objects (with -watch, one array per line)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: pgreplica status [flags] DSN

Prints one row per host of DSN as the pgreplica driver sees it: address,
zone, role, state (receiver state or error), timeline, LSN (a replica's
replayed position), lag behind the primary in bytes and in time, replay
paused, sync state, replay-conflict cancellations in the current database
(pg_stat_database_conflicts), and whether pgreplica sends reads there and
why not. Unreachable hosts and authentication failures show in their row.
Lag in time is measured from pgreplica's own samples of the primary's
position (no clock sync needed), so it counts at most from when status
started looking: -sample without -watch.
The exit code is 1 only when no host is reachable. DSN defaults to $`+dsnEnv+`.

Flags:
`)
		fs.PrintDefaults()
	}
	pos, err := clitext.ParseFlags(fs, args)
	if err != nil {
		return flagExit(err)
	}
	dsn := os.Getenv(dsnEnv)
	switch {
	case len(pos) == 1:
		dsn = pos[0]
	case len(pos) > 1:
		fmt.Fprintln(stderr, "pgreplica status: one DSN expected (quote it if it has spaces)")
		return exitUsage
	case dsn == "":
		fmt.Fprintln(stderr, "pgreplica status: no DSN given (argument or $"+dsnEnv+")")
		fs.Usage()
		return exitUsage
	}
	if o.interval <= 0 || o.sample < 0 {
		fmt.Fprintln(stderr, "pgreplica status: -interval must be positive and -sample not negative")
		return exitUsage
	}
	cfg, err := pgreplica.ParseDSN(dsn)
	if err != nil {
		fmt.Fprintln(stderr, "pgreplica status:", err)
		return exitUsage
	}
	return status(ctx, cfg, o, stdout, stderr)
}

// status runs the status command on a parsed configuration.
func status(ctx context.Context, cfg pgreplica.Config, o statusOptions, stdout, stderr io.Writer) int {
	in, err := newInspector(cfg)
	if err != nil {
		fmt.Fprintln(stderr, "pgreplica status:", err)
		return exitUsage
	}
	defer in.close()

	if !o.watch {
		rep := in.look(ctx, o.sample)
		if ctx.Err() != nil {
			return exitFail
		}
		if err := writeReport(stdout, rep, o.json); err != nil {
			fmt.Fprintln(stderr, "pgreplica status:", err)
			return exitFail
		}
		return reachableExit(rep)
	}

	var rep report
	first := true
	for {
		next := in.look(ctx, 0)
		if ctx.Err() != nil {
			break // keep the last complete look for the exit code
		}
		rep = next
		var err error
		if o.json {
			err = writeJSONLine(stdout, rep)
		} else {
			err = writeFrame(stdout, rep, o.interval, first)
		}
		if err != nil {
			fmt.Fprintln(stderr, "pgreplica status:", err)
			return exitFail
		}
		first = false
		t := time.NewTimer(o.interval)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		if ctx.Err() != nil {
			break
		}
	}
	if !o.json {
		fmt.Fprintln(stdout)
	}
	return reachableExit(rep)
}

func reachableExit(rep report) int {
	if rep.reachable() {
		return exitOK
	}
	return exitFail
}

// inspector watches one cluster through a pgreplica connector, plus a
// direct connection per host for the conflict counters.
type inspector struct {
	cfg       pgreplica.Config
	conn      *pgreplica.Connector
	db        *sql.DB
	conflicts *conflictProbe
	started   bool
}

func newInspector(cfg pgreplica.Config) (*inspector, error) {
	// status runs no statement of its own: the monitor would poll at its
	// idle pace, and its view would be four times as old.
	tuning.Set(&cfg, tuning.Knobs{MonitorInterval: statusMonitorInterval, IdleMonitorInterval: statusMonitorInterval})
	c, err := pgreplica.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	return &inspector{cfg: cfg, conn: c, db: sql.OpenDB(c), conflicts: newConflictProbe(cfg)}, nil
}

func (in *inspector) close() {
	in.db.Close() // closes the connector
	in.conflicts.close()
}

// report is one look at the cluster.
type report struct {
	At    time.Time
	Hosts int
	// PingErr says why writes fail (no primary, split brain, nobody
	// reachable); nil when the primary answered.
	PingErr error
	Nodes   []nodeReport
}

func (r report) reachable() bool {
	for _, n := range r.Nodes {
		if n.Error == "" && n.Role != "unknown" {
			return true
		}
	}
	return false
}

// nodeReport is one host's row, and its JSON object.
type nodeReport struct {
	Addr  string `json:"addr"`
	Zone  string `json:"zone,omitempty"`
	Role  string `json:"role"`  // primary, replica, unknown
	State string `json:"state"` // ok, a replica's receiver state, unreachable, auth failed, error
	Error string `json:"error,omitempty"`
	// Timeline is 0 and LSN "" when the host never answered.
	Timeline   uint32 `json:"timeline"`
	LSN        string `json:"lsn"`
	ReceiveLSN string `json:"receive_lsn,omitempty"`
	// LagBytes and LagMs are null for anything but an answering replica.
	LagBytes     *uint64  `json:"lag_bytes"`
	LagMs        *float64 `json:"lag_ms"`
	ReplayPaused bool     `json:"replay_paused"`
	SyncState    string   `json:"sync_state,omitempty"`
	// Conflicts sums the confl_* counters of pg_stat_database_conflicts
	// for the current database; null when they could not be read.
	Conflicts      *int64  `json:"conflicts"`
	ConflictsError string  `json:"conflicts_error,omitempty"`
	Reads          bool    `json:"reads"`
	Why            string  `json:"why,omitempty"`
	RTTMs          float64 `json:"rtt_ms"`
	// Endpoint: connections of this address reached several servers
	// (Servers); Pooler: a pooler answers for it.
	Endpoint bool           `json:"endpoint,omitempty"`
	Pooler   bool           `json:"pooler,omitempty"`
	Servers  []serverReport `json:"servers,omitempty"`
}

// serverReport is one server behind an endpoint.
type serverReport struct {
	Addr      string    `json:"addr"`
	StartedAt time.Time `json:"started_at"`
	LSN       string    `json:"replayed_lsn,omitempty"`
}

// look connects on first use, waits sample (the first time only: later
// looks already have history), and returns what the connector knows.
func (in *inspector) look(ctx context.Context, sample time.Duration) report {
	var pingErr error
	if !in.started {
		in.started = true
		pctx, cancel := context.WithTimeout(ctx, in.connectTimeout()+2*time.Second)
		pingErr = in.db.PingContext(pctx)
		if pingErr == nil {
			in.sampleServers(pctx)
		}
		cancel()
		if sample > 0 && ctx.Err() == nil {
			t := time.NewTimer(sample)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
	} else {
		pctx, cancel := context.WithTimeout(ctx, in.connectTimeout())
		pingErr = in.db.PingContext(pctx)
		cancel()
	}
	nodes := in.conn.Nodes()
	rep := report{At: time.Now(), Hosts: len(nodes), PingErr: pingErr}
	for _, ns := range nodes {
		rep.Nodes = append(rep.Nodes, nodeRow(ns))
	}
	counts := in.conflicts.read(ctx, nodes, in.connectTimeout())
	for i := range rep.Nodes {
		c := counts[i]
		switch {
		case c.err != nil:
			rep.Nodes[i].ConflictsError = c.err.Error()
		case c.ok:
			rep.Nodes[i].Conflicts = &c.n
		}
	}
	return rep
}

// serversSampled is how many connections status opens at once to the
// replicas: enough for an endpoint's round robin to reach the servers
// behind it.
const serversSampled = 6

// sampleServers holds a few replica connections open at once, so that the
// servers behind an endpoint (one address, several servers) show: each
// new connection tells the driver which server it reached.
func (in *inspector) sampleServers(ctx context.Context) {
	ctx = pgreplica.WithFallback(pgreplica.WithEventual(ctx), pgreplica.FallbackError)
	var held []*sql.Rows
	defer func() {
		for _, r := range held {
			r.Close()
		}
	}()
	for range serversSampled {
		r, err := in.db.QueryContext(ctx, "SELECT 1")
		if err != nil {
			return
		}
		held = append(held, r)
	}
}

func (in *inspector) connectTimeout() time.Duration {
	if in.cfg.ConnectTimeout > 0 {
		return in.cfg.ConnectTimeout
	}
	return 5 * time.Second
}

// nodeRow turns the driver's view of a host into a row.
func nodeRow(ns pgreplica.NodeStatus) nodeReport {
	r := nodeReport{
		Addr:         ns.Addr,
		Zone:         ns.Zone,
		Role:         ns.Role,
		Timeline:     ns.Timeline,
		ReplayPaused: ns.ReplayPaused,
		SyncState:    ns.SyncState,
		Reads:        ns.Reads,
		Why:          ns.Why,
		RTTMs:        ms(ns.RTT),
		Endpoint:     ns.Endpoint,
		Pooler:       ns.Pooler,
	}
	for _, s := range ns.Servers {
		sr := serverReport{Addr: s.Addr, StartedAt: s.StartedAt}
		if s.Replayed != 0 {
			sr.LSN = s.Replayed.String()
		}
		r.Servers = append(r.Servers, sr)
	}
	if ns.LSN != 0 {
		r.LSN = ns.LSN.String()
	}
	switch {
	case ns.Err != nil:
		r.State, r.Error = clitext.ErrState(ns.Err), ns.Err.Error()
		r.Role = "unknown"
		r.Timeline, r.LSN = 0, ""
	case ns.Role == "primary":
		r.State = "ok"
	case ns.Role == "replica":
		r.State = ns.Receiver
		if r.State == "" {
			r.State = "no receiver"
		}
		if ns.ReceiveLSN != 0 {
			r.ReceiveLSN = ns.ReceiveLSN.String()
		}
		lb, lm := ns.LagBytes, ms(ns.LagTime)
		r.LagBytes, r.LagMs = &lb, &lm
	default:
		r.State = "not probed"
	}
	return r
}

// ms converts a duration to milliseconds with microsecond precision.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// writeReport prints one look, as a table or as JSON.
func writeReport(w io.Writer, rep report, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep.Nodes)
	}
	return renderStatus(w, rep)
}

func writeJSONLine(w io.Writer, rep report) error {
	return json.NewEncoder(w).Encode(rep.Nodes)
}

// ANSI sequences for refreshing in place.
const (
	ansiHome        = "\x1b[H"
	ansiClearScreen = "\x1b[2J"
	ansiClearEOL    = "\x1b[K"
	ansiClearBelow  = "\x1b[J"
)

// writeFrame redraws the terminal: home, each line cleared to its end, then
// whatever is left below cleared, so that nothing flickers.
func writeFrame(w io.Writer, rep report, interval time.Duration, first bool) error {
	var b strings.Builder
	if first {
		b.WriteString(ansiClearScreen)
	}
	b.WriteString(ansiHome)
	var body strings.Builder
	fmt.Fprintf(&body, "every %v, Ctrl-C to stop\n", interval)
	if err := renderStatus(&body, rep); err != nil {
		return err
	}
	b.WriteString(strings.ReplaceAll(body.String(), "\n", ansiClearEOL+"\n"))
	b.WriteString(ansiClearBelow)
	_, err := io.WriteString(w, b.String())
	return err
}
