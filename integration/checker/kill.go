package checker

import (
	"context"
	"fmt"
	"time"

	"github.com/pgreplica/pgreplica"
)

// The kill-and-restart fault (Faults.KillRestart).
//
// What it must provoke. A router caches how far each replica has replayed
// and sends a read to a replica whose cached position covers what the read
// needs. Replay only moves forward within one run of a server, so a cache
// that only ever rises is sound — until the replica restarts. A restarted
// standby does not resume where it stopped: crash recovery starts over
// from its last restartpoint, and the server accepts connections as soon
// as it is consistent (it has replayed up to its minimum recovery point),
// which may be long before the position it had reached and served before
// the crash. A router that keeps trusting the position it learned from the
// previous incarnation (or keeps a session on "its" replica without
// noticing that the server behind the address is a new one) sends reads
// there that the replica no longer covers: a session does not see its own
// write, or sees a row go back to a version older than one it already read
// there or elsewhere.
//
// Why a plain kill is not enough. Crash recovery replays everything the
// standby has in pg_wal, and it had received and written at least
// everything it had replayed. Without an apply delay it races through that
// WAL in milliseconds and is past its old position before the first client
// gets in. With an unchanged apply delay, every commit it had applied was
// already older than the delay, so it is applied again at once. A replay
// pause does not survive a restart. What does survive is the setting of
// recovery_min_apply_delay, and the delay applies to every commit replayed
// after consistency, including commits the previous incarnation had
// applied and shown. So the fault raises the delay just before the kill.
//
// The sequence (killRestart), and why each step is there:
//
//  1. The victim gets no apply delay and the other replicas the largest
//     lag (MaxApplyDelay) for a Hold: the victim is the freshest replica,
//     so the sessions read there and their requirements rise to what it
//     shows.
//  2. Sessions stop before their next operation (see parking.go): half of
//     them, or all of them every other kill (a lull). A busy session's
//     requirement, and the process's after any write, soon rise past
//     anything the victim had, and a stale position would never be put to
//     the test; an idle session comes back with the requirement it had.
//  3. Every replica gets recovery_min_apply_delay = KillApplyDelay (ALTER
//     SYSTEM, so it survives the restart). On a running server this stops
//     new commits from becoming visible: the victim is frozen at the
//     position P it served last (Restart.ReplayAtKill), and the other
//     replicas stay behind P for the whole window, so a router that takes
//     the victim for fresh finds it the only replica that can serve an
//     idle session, while a correct router waits and falls back to the
//     primary.
//  4. SIGKILL (Cluster.Kill), a random downtime in [0, MaxDowntime] and
//     Cluster.Start, which returns once the server accepts connections.
//     The harness's servers flush few buffers, so the minimum recovery
//     point (Restart.MinRecovery) is far back (at the base backup or the
//     replica's previous restart in our runs): the server opens long
//     before P and then holds
//     back every commit younger than KillApplyDelay. It comes back at
//     Q < P (Restart.ReplayAtStart) and stays behind P until about
//     KillApplyDelay after the kill: seconds, many monitor intervals of a
//     router, and longer than a router may take to probe the replica
//     again after it failed (pgreplica backs off up to 2 s).
//  5. The idle sessions go on one by one, spread over that window, so the
//     later ones come back after any reasonable router has taken the
//     replica back. Each first re-reads the rows it read and wrote last,
//     and writes nothing until the window ends. The lag cycles leave every
//     replica alone until then too.
//
// The first kill waits until the run's table is older than KillApplyDelay:
// a replica that came back without the table (or with the previous run's)
// would fail reads or show versions of another run. Restart.Behind tells
// whether a restart came back behind (they all did on the harness's
// servers); Report.RestartReads counts the reads the replica served while
// behind (none for a correct router, except reads that needed no more than
// it had), and Report.RestartRegressions the reads that saw one replica go
// back in time across its restart, which the naive router must show.
// Removing, as an experiment, pgreplica's reset of a replica's cached
// position when a probe fails made both pgreplica targets fail with
// hundreds of violations in short runs.

// Restart is one kill and restart of a replica by the injector.
type Restart struct {
	Node int
	// Killed is when the kill began, Started when the server accepted
	// connections again.
	Killed, Started time.Time
	// ReplayAtKill is the replica's pg_last_wal_replay_lsn() just before
	// the kill (what it had shown last); ReplayAtStart the same as soon
	// as it was back.
	ReplayAtKill, ReplayAtStart pgreplica.LSN
	// MinRecovery is the replica's minimum recovery point just before the
	// kill (pg_control_recovery()): it cannot open before replaying that
	// far, so the closer it is to ReplayAtKill, the less behind it can
	// come back.
	MinRecovery pgreplica.LSN
	// Idle are the sessions held idle from just before the kill until
	// some time after the restart (see parking.go), in the order they went
	// on again: all of them in a Lull, half of them otherwise.
	Idle []int
	Lull bool
}

// parkPatience bounds how long the injector waits for the sessions to
// stop before it kills a replica.
const parkPatience = 2 * time.Second

// Behind reports whether the replica came back having replayed less than
// it had before the kill: reads there showed older states than before.
func (r *Restart) Behind() bool { return r.ReplayAtStart < r.ReplayAtKill }

func (r *Restart) String() string {
	s := fmt.Sprintf("restart after %s down (replay %s", r.Started.Sub(r.Killed).Round(time.Millisecond), r.ReplayAtStart)
	if r.Behind() {
		return s + fmt.Sprintf(", %d bytes behind what it had replayed before the kill)", uint64(r.ReplayAtKill-r.ReplayAtStart))
	}
	return s + ", not behind)"
}

// killRestart kills replica i and starts it again (see above). It returns
// when the kill began (zero when the run ended before it). It always
// starts the replica again, even when the run ends meanwhile.
func (in *injector) killRestart(i int) (time.Time, error) {
	f, cl := in.f, in.cl
	err := in.setDelays(func(n int) time.Duration {
		if n == i {
			return 0
		}
		return f.MaxApplyDelay
	})
	if err != nil {
		return time.Time{}, quiet(in.ctx, err)
	}
	if in.hold(in.between(f.Hold/2, f.Hold)) != nil {
		return time.Time{}, nil
	}
	// Sessions go idle across the kill (see parking.go): half of them,
	// or all of them every other kill (a lull), before the replicas stop
	// applying commits: once they do, the sessions' reads would fall back
	// to the primary and raise their requirement past what they had.
	r := Restart{Node: i, Lull: len(in.st.Restarts)%2 == 0}
	r.Idle = in.rng.Perm(in.sessions)
	if !r.Lull {
		r.Idle = r.Idle[:max(in.sessions/2, 1)]
	}
	in.park.park(in.ctx, r.Idle, parkPatience)
	released := false
	defer func() {
		if !released {
			in.park.releaseAll()
		}
	}()
	if err := in.setDelays(func(int) time.Duration { return f.KillApplyDelay }); err != nil {
		return time.Time{}, quiet(in.ctx, err)
	}
	if r.ReplayAtKill, err = in.lsn(in.ctx, i, "pg_last_wal_replay_lsn()"); err != nil {
		return time.Time{}, quiet(in.ctx, err)
	}
	if r.MinRecovery, err = in.lsn(in.ctx, i, "(SELECT min_recovery_end_lsn FROM pg_control_recovery())"); err != nil {
		return time.Time{}, quiet(in.ctx, err)
	}
	r.Killed = time.Now()
	if err := cl.Kill(i); err != nil {
		return r.Killed, fmt.Errorf("checker: fault injection on node %d (kill): %w", i, err)
	}
	in.event(i, fmt.Sprintf("kill (replayed %s, minimum recovery point %s)", r.ReplayAtKill, r.MinRecovery))
	_ = in.hold(in.between(0, f.MaxDowntime)) // cut short when the run ends
	sctx, cancel := context.WithTimeout(context.WithoutCancel(in.ctx), faultStep)
	defer cancel()
	if err := cl.Start(sctx, i); err != nil {
		return r.Killed, fmt.Errorf("checker: fault injection on node %d (restart): %w", i, err)
	}
	r.Started = time.Now()
	if r.ReplayAtStart, err = in.lsn(sctx, i, "pg_last_wal_replay_lsn()"); err != nil {
		return r.Killed, err
	}
	end := r.Killed.Add(f.KillApplyDelay)
	window := end.Sub(r.Started)
	for k, id := range r.Idle {
		in.park.release(id, r.Started.Add(window*time.Duration(k+1)/time.Duration(len(r.Idle)+1)), end)
	}
	released = true
	in.st.Restarts = append(in.st.Restarts, r)
	in.event(i, r.String())
	// The lag cycles leave the replicas alone while the victim is behind
	// what it served.
	for _, n := range in.replicas {
		in.held[n] = r.Killed.Add(f.KillApplyDelay)
	}
	return r.Killed, nil
}

// lsn reads a position on node i: expr is an expression of type pg_lsn.
func (in *injector) lsn(ctx context.Context, i int, expr string) (pgreplica.LSN, error) {
	sctx, cancel := context.WithTimeout(ctx, faultStep)
	defer cancel()
	s, err := in.cl.QueryString(sctx, i, "SELECT "+expr+"::text")
	if err != nil {
		return 0, fmt.Errorf("checker: reading %s on node %d: %w", expr, i, err)
	}
	if s == "" {
		return 0, nil
	}
	return pgreplica.ParseLSN(s)
}
