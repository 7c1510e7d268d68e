//go:build linux

package patronitest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration/checker"
	"github.com/pgreplica/pgreplica/integration/patroni"
)

// The workload's tables: kv holds each session's rows (the checker's
// Key and version), wlog one row per write attempt, which tells after the
// run which acknowledged writes the cluster kept, and where each was
// committed (the server's port and the timeline it wrote on).
const schema = `
CREATE TABLE kv (session int, key int, version int NOT NULL, PRIMARY KEY (session, key));
CREATE TABLE wlog (
	session int, seq int, key int NOT NULL, version int NOT NULL,
	port int NOT NULL DEFAULT inet_server_port(),
	walfile text NOT NULL DEFAULT pg_walfile_name(pg_current_wal_insert_lsn()),
	PRIMARY KEY (session, seq));
INSERT INTO kv SELECT s, k, 0 FROM generate_series(0, %d) s, generate_series(0, %d) k;`

const (
	// writeCTE updates a row and logs the write in one statement.
	writeCTE = `WITH u AS (UPDATE kv SET version = $3 WHERE session = $1 AND key = $2 RETURNING 1)
INSERT INTO wlog (session, seq, key, version) SELECT $1, $4, $2, $3 FROM u`
	// writeReturning is writeCTE telling where it ran.
	writeReturning = writeCTE + ` RETURNING port, walfile`
	update         = `UPDATE kv SET version = $3 WHERE session = $1 AND key = $2`
	logWrite       = `INSERT INTO wlog (session, seq, key, version) VALUES ($1, $2, $3, $4) RETURNING port, walfile`
	readRow        = `SELECT version, inet_server_port(), pg_last_wal_replay_lsn()::text, pg_is_in_recovery()
FROM kv WHERE session = $1 AND key = $2`
)

// Write paths (each captures the write's position differently in the
// driver) and read paths.
const (
	pathExec      = "exec"      // writeCTE through ExecContext
	pathReturning = "returning" // writeReturning through QueryRowContext
	pathTx        = "tx"        // UPDATE and INSERT … RETURNING in a read-write transaction
	pathQuery     = "query"     // SELECT through QueryRowContext
	pathReadTx    = "ro-tx"     // SELECT in a read-only transaction
)

// opTimeout is each operation's deadline: the caller's patience, longer
// than Patroni needs to promote after a switchover or a crash.
const opTimeout = 3 * time.Second

// op is one operation: the checker's record, and what the workload
// learned besides.
type op struct {
	checker.Op
	// LogSeq is the write's row in wlog.
	LogSeq int
	// Timeline is the timeline the server wrote a write on (RETURNING,
	// or its wlog row), 0 when unknown.
	Timeline int
	// OnPrimary reports that a read ran on a server out of recovery.
	OnPrimary bool
}

// handles are what the sessions write and read through: one pgreplica
// handle for both (cn its connector), or the naive baseline's two
// handles.
type handles struct {
	write, read handle
	cn          *pgreplica.Connector
}

// workload runs sessions through db until stopped.
type workload struct {
	db       handles
	c        *patroni.Cluster
	sessions int
	keys     int
	seed     uint64
	// marks says which sessions read their watermark after each
	// operation (Session.LSN, as the checker does, and as an application
	// that hands a token back after each request does), for
	// checker.CheckWatermarks.
	marks func(session int) bool

	stop chan struct{}
	wg   sync.WaitGroup
	logs [][]op
	ss   []*pgreplica.Session
}

func newWorkload(db handles, c *patroni.Cluster, sessions, keys int, seed uint64, marks func(int) bool) *workload {
	return &workload{db: db, c: c, sessions: sessions, keys: keys, seed: seed, marks: marks,
		stop: make(chan struct{}), logs: make([][]op, sessions), ss: make([]*pgreplica.Session, sessions)}
}

func (w *workload) start() {
	for id := range w.sessions {
		s := &session{w: w, id: id, sess: pgreplica.NewSession(),
			rng: rand.New(rand.NewPCG(w.seed, uint64(id))), versions: make([]int, w.keys)}
		w.ss[id] = s.sess
		w.wg.Go(func() { w.logs[id] = s.run() })
	}
}

// halt stops the sessions after their current operation and returns
// every operation.
func (w *workload) halt() []op {
	close(w.stop)
	w.wg.Wait()
	var all []op
	for _, l := range w.logs {
		all = append(all, l...)
	}
	return all
}

type session struct {
	w        *workload
	id       int
	sess     *pgreplica.Session
	rng      *rand.Rand
	versions []int // last version tried per own row
	log      []op
	seq      int // operations so far
	writes   int // wlog rows so far
	failures int // operations failed in a row
	mark     pgreplica.LSN
}

func (s *session) stopped() bool {
	select {
	case <-s.w.stop:
		return true
	default:
		return false
	}
}

// run is the session's loop: write one of its rows and read it back at
// once, read another session's row twice, and one of its own rows.
func (s *session) run() []op {
	writePaths := [...]string{pathExec, pathReturning, pathTx}
	for round := 0; !s.stopped(); round++ {
		readPath := pathQuery
		if round%3 == 2 {
			readPath = pathReadTx
		}
		k := s.rng.IntN(s.w.keys)
		s.versions[k]++ // a failed write may have committed: never reuse a version
		own := checker.Key{Owner: s.id, N: k}
		if w := s.record(s.write(own, s.versions[k], writePaths[round%len(writePaths)])); w.Err == nil {
			s.record(s.read(own, readPath, "own-now"))
		}
		other := checker.Key{Owner: (s.id + 1 + s.rng.IntN(s.w.sessions-1)) % s.w.sessions, N: s.rng.IntN(s.w.keys)}
		s.record(s.read(other, pathQuery, "other"))
		s.record(s.read(other, readPath, "other-again"))
		s.record(s.read(checker.Key{Owner: s.id, N: s.rng.IntN(s.w.keys)}, pathQuery, "own-later"))
	}
	return s.log
}

// record logs o; after a failure the session pauses a little, more after
// each failure in a row (up to 50 ms), as a client that retries does.
func (s *session) record(o op) op {
	o.Session, o.Seq = s.id, s.seq
	s.seq++
	s.log = append(s.log, o)
	if o.Err == nil {
		s.failures = 0
		return o
	}
	s.failures++
	pause := min(time.Duration(s.failures)*5*time.Millisecond, 50*time.Millisecond)
	select {
	case <-s.w.stop:
	case <-time.After(pause):
	}
	return o
}

func (s *session) begin(kind checker.OpKind, key checker.Key, path, role string) (op, context.Context, context.CancelFunc) {
	// InSession marks the operations whose watermark is known, for
	// checker.CheckWatermarks (every one carries the session).
	// With -patroni.own=process the session's own rows are written and
	// read with no Session: the driver's process consistency answers
	// for them, as the checker's pgreplica-process target does.
	withSession := *ownRows == "session" || key.Owner != s.id
	o := op{Op: checker.Op{Kind: kind, Key: key, Path: path, Role: role, Node: -1, InSession: withSession && s.w.marks(s.id)}}
	ctx := context.Background()
	if withSession {
		ctx = pgreplica.WithSession(ctx, s.sess)
	}
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	o.WatermarkBefore = s.mark
	o.Start = time.Now()
	return o, ctx, cancel
}

func (s *session) end(o *op) {
	o.End = time.Now()
	if s.w.marks(s.id) {
		s.mark = s.sess.LSN()
	}
	o.WatermarkAfter = s.mark
}

// write sets own row key to version, by path, and logs it in wlog.
func (s *session) write(key checker.Key, version int, path string) op {
	o, ctx, cancel := s.begin(checker.OpWrite, key, path, "write")
	defer cancel()
	if *replicated > 0 && *router != "naive" {
		ctx = pgreplica.WithReplicated(ctx, *replicated)
	}
	o.Version = version
	o.LogSeq = s.writes
	s.writes++
	var (
		port    int
		walfile string
		err     error
	)
	switch path {
	case pathExec:
		err = oneRow(s.w.db.write.exec(ctx, writeCTE, key.Owner, key.N, version, o.LogSeq))
	case pathReturning:
		err = s.w.db.write.queryRow(ctx, writeReturning, key.Owner, key.N, version, o.LogSeq).Scan(&port, &walfile)
	case pathTx:
		err = s.writeTx(ctx, key, version, o.LogSeq, &port, &walfile)
	}
	s.end(&o)
	if err != nil {
		o.Err = fmt.Errorf("write %s v%d (%s): %w", key, version, path, err)
		return o
	}
	if port != 0 {
		o.Node = s.w.c.NodeAt(port)
		o.Timeline = timelineOf(walfile)
	}
	return o
}

func (s *session) writeTx(ctx context.Context, key checker.Key, version, seq int, port *int, walfile *string) error {
	tx, err := s.w.db.write.begin(ctx, false)
	if err != nil {
		return err
	}
	err = oneRow(tx.exec(ctx, update, key.Owner, key.N, version))
	if err == nil {
		err = tx.queryRow(ctx, logWrite, key.Owner, seq, key.N, version).Scan(port, walfile)
	}
	if err != nil {
		return errors.Join(err, tx.rollback())
	}
	return tx.commit()
}

// oneRow says why a statement that should change one row did not.
func oneRow(n int64, err error) error {
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("%d rows, want 1", n)
	}
	return nil
}

// read reads row key by path; role says why (see checker.Op.Role).
func (s *session) read(key checker.Key, path, role string) op {
	o, ctx, cancel := s.begin(checker.OpRead, key, path, role)
	defer cancel()
	var (
		port     int
		replay   sql.NullString
		recovery bool
		err      error
	)
	dest := []any{&o.Version, &port, &replay, &recovery}
	switch path {
	case pathQuery:
		err = s.w.db.read.queryRow(ctx, readRow, key.Owner, key.N).Scan(dest...)
	case pathReadTx:
		var tx tx
		if tx, err = s.w.db.read.begin(ctx, true); err == nil {
			if err = tx.queryRow(ctx, readRow, key.Owner, key.N).Scan(dest...); err != nil {
				err = errors.Join(err, tx.rollback())
			} else {
				err = tx.commit()
			}
		}
	}
	s.end(&o)
	if err == nil && replay.Valid {
		o.ReplayLSN, err = pgreplica.ParseLSN(replay.String)
	}
	if err != nil {
		o.Err = fmt.Errorf("read %s (%s, %s): %w", key, role, path, err)
		return o
	}
	o.Node = s.w.c.NodeAt(port)
	o.OnPrimary = !recovery
	return o
}

// timelineOf reads the timeline from a WAL file name (its first eight
// hexadecimal digits), 0 if it is not one.
func timelineOf(walfile string) int {
	if len(walfile) < 8 {
		return 0
	}
	tl, err := strconv.ParseUint(walfile[:8], 16, 32)
	if err != nil {
		return 0
	}
	return int(tl)
}
