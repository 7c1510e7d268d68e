package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"sync/atomic"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"

	"github.com/pgreplica/pgreplica"
)

// workerEnv selects worker mode: it holds the worker's workerConfig as
// JSON.
const workerEnv = "PGREPLICA_FLEET_WORKER"

// workerConfig is what a worker process is told by its parent.
type workerConfig struct {
	Side      string        `json:"side"` // sidePgx or sidePgreplica
	DSN       string        `json:"dsn"`
	Run       int           `json:"run"`   // the parent's run number, part of the row ids
	Index     int           `json:"index"` // the worker's number in its run
	WriteRate float64       `json:"write_rate"`
	ReadRate  float64       `json:"read_rate"`
	Timeout   time.Duration `json:"timeout"`
}

// firstID is the first row id of the worker, which counts up from it: the
// run in bits 48 and up, the worker in bits 32 to 47.
func (c workerConfig) firstID() int64 { return int64(c.Run)<<48 | int64(c.Index)<<32 }

// The protocol. The parent writes commands to a worker's stdin, one a
// line: "go" starts the load, "idle" stops it (the worker stays
// connected and answers "idle"); end of file makes the worker close its
// *sql.DB and exit. The worker writes messages to its stdout, one JSON
// object a line: "ready" once connected, then a "w" or "r" for every write
// and read, an "err" for every failed one, and "idle".
type message struct {
	Kind string `json:"k"`
	End  int64  `json:"t,omitempty"`    // when the operation ended, Unix ns
	Lat  int64  `json:"ns,omitempty"`   // its latency, ns
	Port int    `json:"port,omitempty"` // r: the server's inet_server_port()
	Op   string `json:"op,omitempty"`   // err: "w" or "r"
	Msg  string `json:"msg,omitempty"`  // err
	// r, pgreplica: the replay checks the read sent before it ran, and
	// those that rode in its own flight (Stats.ReplayChecks, FlightChecks).
	Checks int64 `json:"c,omitempty"`
	Flight int64 `json:"f,omitempty"`
	// r, pgreplica: the read went to the primary for its process's recent
	// write (Stats.RecentWriteReads), or fell back (FallbackReads).
	Recent   int64 `json:"rw,omitempty"`
	Fallback int64 `json:"fb,omitempty"`
	// r, pgreplica: the replicas' largest time lag the monitor knew after
	// the read (NodeStatus.LagTime), ns.
	Lag int64 `json:"lag,omitempty"`
	// r, pgreplica: the hedges the read sent (Stats.Hedges).
	Hedges int64 `json:"h,omitempty"`
}

const (
	insertSQL = "INSERT INTO " + table + " (id, worker, v) VALUES ($1, $2, $3)"
	selectSQL = "SELECT v, inet_server_port()::int FROM " + table + " WHERE id = $1"
)

// runWorker is the worker process's main.
func runWorker(spec string) int {
	// Ctrl-C in a terminal reaches the whole process group: the parent
	// stops the workers itself, through their stdin.
	signal.Ignore(os.Interrupt)
	var cfg workerConfig
	if err := json.Unmarshal([]byte(spec), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "pgreplica-fleet worker:", err)
		return 2
	}
	out := &emitter{w: os.Stdout}
	driverName := "pgx"
	if cfg.Side == sidePgreplica {
		driverName = pgreplica.DriverName
	}
	db, err := sql.Open(driverName, cfg.DSN)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
		err = db.PingContext(ctx)
		cancel()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgreplica-fleet worker %d: %v\n", cfg.Index, err)
		return 1
	}
	out.emit(message{Kind: "ready"})
	var cn *pgreplica.Connector // the pgreplica side's, for its checks
	if cfg.Side == sidePgreplica {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
		cn, err = pgreplica.ConnectorOf(ctx, db)
		cancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "pgreplica-fleet worker %d: %v\n", cfg.Index, err)
			return 1
		}
	}

	cmds := make(chan string)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			cmds <- sc.Text()
		}
		close(cmds) // the parent closed our stdin, or died
	}()
	var l *load
	for cmd := range cmds {
		switch cmd {
		case "go":
			if l == nil {
				l = startLoad(db, cn, cfg, out)
			}
		case "idle":
			if l != nil {
				l.stop()
			}
			out.emit(message{Kind: "idle"})
		}
	}
	if l != nil {
		l.stop()
	}
	// Close politely, but do not outlive the parent by long.
	closed := make(chan struct{})
	go func() { db.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
	}
	return 0
}

// load is a worker's writes and reads.
type load struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// startLoad starts a writer and a reader, each paced by its own ticker
// from a random phase, so that the fleet's operations spread out. The
// reader reads the row the writer wrote last.
func startLoad(db *sql.DB, cn *pgreplica.Connector, cfg workerConfig, out *emitter) *load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{cancel: cancel}
	var last atomic.Int64 // id of the last row written
	next := cfg.firstID()
	l.wg.Add(2)
	go func() {
		defer l.wg.Done()
		pace(ctx, cfg.WriteRate, func() {
			next++
			id := next
			began := time.Now()
			// The operation's own context: stopping the load lets a
			// statement in flight finish.
			opCtx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
			_, err := db.ExecContext(opCtx, insertSQL, id, cfg.Index, "fleet row")
			cancel()
			end := time.Now()
			if err != nil {
				out.fail("w", end, err)
				return
			}
			last.Store(id)
			out.emit(message{Kind: "w", End: end.UnixNano(), Lat: int64(end.Sub(began))})
		})
	}()
	go func() {
		defer l.wg.Done()
		pace(ctx, cfg.ReadRate, func() {
			id := last.Load()
			if id == 0 {
				return
			}
			var before pgreplica.Stats
			if cn != nil {
				before = cn.Stats()
			}
			began := time.Now()
			// A context with a deadline and no pgreplica value: the
			// process's default consistency, as context.Background().
			opCtx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
			var v string
			var port int
			err := db.QueryRowContext(opCtx, selectSQL, id).Scan(&v, &port)
			cancel()
			end := time.Now()
			if errors.Is(err, sql.ErrNoRows) {
				err = fmt.Errorf("row %d, written by this process, not found", id)
			}
			if err != nil {
				out.fail("r", end, err)
				return
			}
			m := message{Kind: "r", End: end.UnixNano(), Lat: int64(end.Sub(began)), Port: port}
			if cn != nil {
				after := cn.Stats()
				m.Checks, m.Flight = after.ReplayChecks-before.ReplayChecks, after.FlightChecks-before.FlightChecks
				m.Recent, m.Fallback = after.RecentWriteReads-before.RecentWriteReads, after.FallbackReads-before.FallbackReads
				m.Hedges = after.Hedges - before.Hedges
				for _, n := range after.Nodes {
					if n.Role == pgreplica.RoleReplica {
						m.Lag = max(m.Lag, int64(n.LagTime))
					}
				}
			}
			out.emit(m)
		})
	}()
	return l
}

// stop ends the load and waits for the operations in flight.
func (l *load) stop() {
	l.once.Do(func() {
		l.cancel()
		l.wg.Wait()
	})
}

// pace calls op rate times a second until ctx ends, starting after a
// random part of the interval. A slow op delays the next, and missed
// ticks are dropped, as a time.Ticker does.
func pace(ctx context.Context, rate float64, op func()) {
	every := time.Duration(float64(time.Second) / rate)
	select {
	case <-time.After(rand.N(every)):
	case <-ctx.Done():
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		op()
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// emitter writes messages to the parent, one line each.
type emitter struct {
	mu     sync.Mutex
	w      io.Writer
	errors int
}

func (e *emitter) emit(m message) {
	b, err := json.Marshal(m)
	if err != nil {
		panic(err) // a message always marshals
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, err := e.w.Write(append(b, '\n')); err != nil {
		os.Exit(1) // the parent is gone
	}
}

func (e *emitter) fail(op string, end time.Time, err error) {
	e.emit(message{Kind: "err", End: end.UnixNano(), Op: op, Msg: err.Error()})
}

// workerProc is the parent's handle on a worker process.
type workerProc struct {
	index int
	cmd   *exec.Cmd
	stdin io.WriteCloser
	ready chan struct{} // receives once the worker is connected
	idle  chan struct{} // receives each time the worker has stopped its load
	done  chan struct{} // closed when the worker's stdout ends
}

// maxErrorsShown bounds the failed operations printed per worker.
const maxErrorsShown = 3

// startWorker starts a worker process running exe, whose samples go to
// sink.
func startWorker(exe string, cfg workerConfig, sink *samples) (*workerProc, error) {
	spec, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), workerEnv+"="+string(spec))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = workerSysProcAttr()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	w := &workerProc{
		index: cfg.Index, cmd: cmd, stdin: stdin,
		ready: make(chan struct{}, 1), idle: make(chan struct{}, 1), done: make(chan struct{}),
	}
	go func() {
		defer close(w.done)
		shown := 0
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var m message
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				logf("worker %d: %q: %v", w.index, sc.Text(), err)
				continue
			}
			switch m.Kind {
			case "ready":
				w.ready <- struct{}{}
			case "idle":
				w.idle <- struct{}{}
			case "err":
				if shown++; shown <= maxErrorsShown {
					logf("worker %d: %s: %s", w.index, m.Op, m.Msg)
				}
				fallthrough
			default:
				sink.add(m)
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	return w, nil
}

// send writes a command to the worker.
func (w *workerProc) send(cmd string) error {
	if _, err := io.WriteString(w.stdin, cmd+"\n"); err != nil {
		return fmt.Errorf("worker %d: %w", w.index, err)
	}
	return nil
}

// exited reports whether the worker's stdout has ended.
func (w *workerProc) exited() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// stopWorkers closes every worker's stdin, which makes it exit, and waits
// for all of them; a worker still running after 10 s is killed. It
// reports workers that failed.
func stopWorkers(procs []*workerProc) error {
	for _, w := range procs {
		w.stdin.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	var errs []error
	for _, w := range procs {
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-w.done:
		case <-t.C:
			_ = w.cmd.Process.Kill()
			<-w.done
		}
		t.Stop()
		if err := w.cmd.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("worker %d: %w", w.index, err))
		}
	}
	return errors.Join(errs...)
}
