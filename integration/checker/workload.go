package checker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgreplica/pgreplica"
)

// maxFailuresInRow and failingFor stop a session whose operations keep
// failing: that many in a row, over at least that long (a proxy restart
// refuses connections for a few milliseconds, in which a session that
// fails fast could fail many times).
const (
	maxFailuresInRow = 20
	failingFor       = 2 * time.Second
)

// failurePause is how long a session pauses after each failed operation
// in a row, up to maxFailurePause: a client does not retry in a tight
// loop.
const (
	failurePause    = time.Millisecond
	maxFailurePause = 20 * time.Millisecond
)

// runSessions runs o.Sessions concurrent sessions until o.Duration has
// passed and returns their logs. The injector may hold some of them idle
// for a while through park.
func runSessions(ctx context.Context, r *router, cl Cluster, o *Options, park *parking) ([][]Op, error) {
	logs := make([][]Op, o.Sessions)
	errs := make([]error, o.Sessions)
	deadline := time.Now().Add(o.Duration)
	st := statementsFor(o.Table)
	nodes := portMap(cl)
	hot := make([]atomic.Int32, o.Sessions)
	var wg sync.WaitGroup
	for id := range o.Sessions {
		c := &client{id: id, r: r, st: st, nodes: nodes, primary: cl.Primary()}
		if o.Target.Pgreplica() {
			c.session = pgreplica.NewSession()
		}
		rng := rand.New(rand.NewPCG(o.Seed, uint64(id)))
		wg.Go(func() { logs[id], errs[id] = runSession(ctx, c, o, rng, deadline, hot, park) })
	}
	wg.Wait()
	return logs, errors.Join(errs...)
}

// loop is one workload session's state.
//
// A round writes one of the session's rows and reads it back at once
// (every other round on average, so that the session's watermark sometimes
// ages and its reads spread over replicas at different lag), reads another
// session's row three times, re-reads the other session's row it read last
// round, and reads one of its own rows again. hot[s] is the row session s is
// writing: a session writes the same row focusWrites times in a row, and
// most reads of other sessions' rows take their hot row, which changes
// while it is read and so may differ between the nodes.
//
// When the primary served a read of another session's row (a router's
// fallback), the session chases it: it reads the row again at once, up to
// chaseReads times until a replica serves it, and refreshes it in each of
// the next refreshRounds rounds without writing meanwhile, as a user
// reloading a page would. The primary showed the newest version; a router
// that forgets it sends the next read to a replica that has just reached
// the session's watermark but not that version.
//
// Around a kill, the injector may hold the session idle before any of its
// operations (see parking.go and idle).
type loop struct {
	c        *client
	o        *Options
	rng      *rand.Rand
	hot      []atomic.Int32
	log      []Op
	failures int       // operations failed in a row
	failing  time.Time // when the first of them began
	refresh  map[Key]int
	versions []int // last version tried per own row
	k        int   // the own row being written
	writes   int
	prev     *Key // the other session's row read last round
	park     *parking
	deadline time.Time
	readOnly time.Time // no writes before then (see parking.go)
}

// Workload shape; see loop.
const (
	focusWrites   = 4
	chaseReads    = 4
	refreshRounds = 5
)

// errDeadline ends a session at the end of the run, between operations.
var errDeadline = errors.New("checker: the run ended")

func runSession(ctx context.Context, c *client, o *Options, rng *rand.Rand, deadline time.Time, hot []atomic.Int32, park *parking) ([]Op, error) {
	s := &loop{c: c, o: o, rng: rng, hot: hot, refresh: map[Key]int{}, versions: make([]int, o.Keys),
		park: park, deadline: deadline}
	round := s.round
	if o.Workload == WorkloadCounter {
		round = s.counterRound
	}
	for r := 0; time.Now().Before(deadline); r++ {
		if err := ctx.Err(); err != nil {
			return s.log, err
		}
		if err := round(ctx, r); err != nil {
			if errors.Is(err, errDeadline) {
				break
			}
			return s.log, err
		}
	}
	return s.log, nil
}

// idle runs before each operation. It fails with errDeadline once the run
// is over: a round that falls back to the primary read after read may take
// seconds. It holds the session while the injector parks it (see
// parking.go); then, before going on, the session re-reads the other
// session's row it read last and its own row it wrote last, as a user
// reloading the page would, and it writes nothing for a while.
func (s *loop) idle(ctx context.Context) error {
	if !time.Now().Before(s.deadline) {
		return errDeadline
	}
	held, readOnly := s.park.wait(ctx, s.c.id, s.deadline)
	if !held {
		return nil
	}
	s.readOnly = readOnly
	if err := ctx.Err(); err != nil {
		return err
	}
	if !time.Now().Before(s.deadline) {
		return errDeadline
	}
	if s.prev != nil {
		if err := s.read(ctx, *s.prev, pathQuery, "other-later"); err != nil {
			return err
		}
	}
	if s.writes > 0 {
		return s.read(ctx, Key{Owner: s.c.id, N: s.k}, pathQuery, "own-later")
	}
	return nil
}

func (s *loop) round(ctx context.Context, round int) error {
	c := s.c
	readPath := pathQuery
	switch {
	case round%4 == 3:
		readPath = pathReadTx
	case round%4 == 1 && c.r.pgx != nil:
		readPath = pathBatch
	}
	write := s.rng.IntN(2) == 0 && len(s.refresh) == 0
	if write {
		// A session held here comes back read-only for a while.
		if err := s.idle(ctx); err != nil {
			return err
		}
	}
	if write && !time.Now().Before(s.readOnly) {
		if s.writes%focusWrites == 0 {
			s.k = s.rng.IntN(s.o.Keys)
		}
		s.writes++
		// A failed write may have committed: never reuse its version.
		s.versions[s.k]++
		own := Key{Owner: c.id, N: s.k}
		s.hot[c.id].Store(int32(s.k))
		writePaths := [...]string{pathExec, pathReturning, pathTx}
		if err := s.record(ctx, c.write(ctx, own, s.versions[s.k], writePaths[round%len(writePaths)])); err != nil {
			return err
		}
		if err := s.read(ctx, own, readPath, "own-now"); err != nil {
			return err
		}
	}
	// Another session's row right after the write: it needs the new
	// watermark too, so it is the read most likely to fall back to the
	// primary, which shows versions no replica has yet.
	other := Key{Owner: (c.id + 1 + s.rng.IntN(s.o.Sessions-1)) % s.o.Sessions, N: s.rng.IntN(s.o.Keys)}
	if round%4 != 0 {
		other.N = int(s.hot[other.Owner].Load())
	}
	for i, path := range []string{pathQuery, readPath, pathQuery} {
		role := "other"
		if i > 0 {
			role = "other-again"
		}
		if err := s.read(ctx, other, path, role); err != nil {
			return err
		}
	}
	if s.prev != nil {
		if err := s.read(ctx, *s.prev, pathQuery, "other-later"); err != nil {
			return err
		}
	}
	s.prev = &other
	if err := s.read(ctx, Key{Owner: c.id, N: s.rng.IntN(s.o.Keys)}, pathQuery, "own-later"); err != nil {
		return err
	}
	for _, k := range slices.SortedFunc(maps.Keys(s.refresh), compareKeys) {
		if s.refresh[k]--; s.refresh[k] <= 0 {
			delete(s.refresh, k)
		}
		if err := s.read(ctx, k, pathQuery, "refresh"); err != nil {
			return err
		}
	}
	return nil
}

// counterRound is a round of WorkloadCounter: the session reads its row
// from the primary, writes the next version, reads it back at once and
// reads a random other session's row.
func (s *loop) counterRound(ctx context.Context, _ int) error {
	c := s.c
	own := Key{Owner: c.id, N: s.rng.IntN(s.o.Keys)}
	if err := s.idle(ctx); err != nil {
		return err
	}
	if err := s.record(ctx, c.read(ctx, own, pathPrimary, "own-primary")); err != nil {
		return err
	}
	s.versions[own.N]++ // a failed write may have committed: never reuse its version
	s.writes++
	s.k = own.N
	if err := s.record(ctx, c.write(ctx, own, s.versions[own.N], pathExec)); err != nil {
		return err
	}
	if err := s.record(ctx, c.read(ctx, own, pathQuery, "own-now")); err != nil {
		return err
	}
	other := Key{Owner: (c.id + 1 + s.rng.IntN(s.o.Sessions-1)) % s.o.Sessions, N: s.rng.IntN(s.o.Keys)}
	return s.record(ctx, c.read(ctx, other, pathQuery, "other"))
}

// read reads a row and chases it when the primary served another
// session's row.
func (s *loop) read(ctx context.Context, k Key, path, role string) error {
	if err := s.idle(ctx); err != nil {
		return err
	}
	op := s.c.read(ctx, k, path, role)
	if err := s.record(ctx, op); err != nil {
		return err
	}
	for i := 0; i < chaseReads && op.Err == nil && !op.Own() && op.Node == s.c.primary; i++ {
		s.refresh[k] = refreshRounds
		if err := s.idle(ctx); err != nil {
			return err
		}
		op = s.c.read(ctx, k, pathQuery, "refresh")
		if err := s.record(ctx, op); err != nil {
			return err
		}
	}
	return nil
}

// record appends op to the log. It fails once maxFailuresInRow operations
// in a row have failed over failingFor: the cluster or the router is
// broken and the history would say nothing. After a failed operation the
// session pauses a little longer each time (failurePause).
func (s *loop) record(ctx context.Context, op Op) error {
	op.Seq = len(s.log)
	s.log = append(s.log, op)
	if op.Err == nil {
		s.failures = 0
		return nil
	}
	if s.failures == 0 {
		s.failing = op.Start
	}
	if s.failures++; s.failures >= maxFailuresInRow && op.End.Sub(s.failing) >= failingFor {
		return fmt.Errorf("checker: session %d: %d operations in a row failed over %v, the last: %w",
			s.c.id, s.failures, op.End.Sub(s.failing).Round(time.Millisecond), op.Err)
	}
	t := time.NewTimer(min(time.Duration(s.failures)*failurePause, maxFailurePause))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	return nil
}
