//go:build linux

package patroni

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Switchover asks Patroni for a switchover from the current leader to
// member to (-1: the synchronous standby with synchronous_mode, else the
// first streaming replica) through the leader's REST API
// (POST /switchover, as patronictl switchover does), and returns once the
// new leader accepts writes. Patroni demotes the old leader first (a
// fast shutdown; it comes back as a replica) and then promotes the
// candidate.
func (c *Cluster) Switchover(ctx context.Context, to int) (from, leader int, err error) {
	h, why := c.health(ctx, 1)
	if why != "" {
		return -1, -1, fmt.Errorf("patroni: switchover: the cluster is not healthy: %s", why)
	}
	from = h.Leader
	if to < 0 {
		switch {
		case h.SyncStandby >= 0:
			to = h.SyncStandby
		case len(h.Replicas) > 0:
			to = h.Replicas[0]
		default:
			return from, -1, errors.New("patroni: switchover: no replica")
		}
	}
	body := map[string]string{"leader": c.Name(from), "candidate": c.Name(to)}
	// Patroni answers once the candidate holds the leader key, polling
	// once a second for up to 20 s.
	resp, code, err := c.call(ctx, http.MethodPost, c.RESTAddr(from)+"/switchover", body, 30*time.Second)
	if err != nil {
		return from, -1, c.withState(fmt.Errorf("patroni: switchover m%d → m%d: %w", from, to, err))
	}
	if code != http.StatusOK {
		return from, -1, c.withState(fmt.Errorf("patroni: switchover m%d → m%d: %d %s", from, to, code, strings.TrimSpace(resp)))
	}
	leader, err = c.WaitLeader(ctx, from)
	return from, leader, err
}

// Failover crashes the leader's PostgreSQL (SIGKILL to the postmaster,
// then to every other process of the server, as a crashed server or
// host) and returns the member it crashed. Patroni notices within a
// loop_wait: with primary_start_timeout 0 (see
// Options.RestartCrashedPrimary) it gives the leader key up and another
// member is promoted, and the crashed one comes back as a replica (with
// pg_rewind when it had diverged). Await the new leader with WaitLeader.
func (c *Cluster) Failover(ctx context.Context) (int, error) {
	leader, err := c.Leader(ctx)
	if err != nil {
		return -1, err
	}
	return leader, c.Kill(leader)
}

// Kill crashes member i's PostgreSQL as a crashed host would: SIGKILL to
// its postmaster and, at once, to every other process of its data
// directory (listed beforehand: a backend left running a few milliseconds
// longer could still commit), then to any it forked meanwhile. Its Patroni
// daemon is left running and reacts as it does to a crash.
func (c *Cluster) Kill(i int) error {
	m := c.member(i)
	pm := postmasterPid(m.data)
	if pm == 0 {
		return c.withState(fmt.Errorf("patroni: m%d has no running postmaster", i))
	}
	others := procsIn(m.data, false)
	if err := signalPid(pm, syscall.SIGKILL); err != nil {
		return fmt.Errorf("patroni: killing m%d's postmaster %d: %w", i, pm, err)
	}
	for _, pid := range others {
		_ = signalPid(pid, syscall.SIGKILL)
	}
	for _, pid := range procsIn(m.data, false) {
		_ = signalPid(pid, syscall.SIGKILL)
	}
	return nil
}

// Freeze stops member i where it stands, as a hung host: SIGSTOP to its
// PostgreSQL postmaster, its Patroni daemon and every other process of
// its server. Connections to it are accepted by the kernel and hear
// nothing; its REST API answers nothing; its leader key (if it holds it)
// expires after the TTL. Thaw lets it run on.
func (c *Cluster) Freeze(i int) error {
	m := c.member(i)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(m.frozen) > 0 {
		return nil
	}
	var pids []int
	if pm := postmasterPid(m.data); pm > 0 {
		pids = append(pids, pm) // first: it forks nothing more
	}
	if m.patroni != nil && m.patroni.running() {
		pids = append(pids, m.patroni.pid())
	}
	for _, pid := range procsIn(m.data, false) {
		if !slices.Contains(pids, pid) {
			pids = append(pids, pid)
		}
	}
	for _, pid := range pids {
		if err := signalPid(pid, syscall.SIGSTOP); err != nil {
			return fmt.Errorf("patroni: freezing m%d (pid %d): %w", i, pid, err)
		}
	}
	m.frozen = pids
	return nil
}

// Thaw resumes member i after Freeze (SIGCONT to what Freeze stopped, the
// server's processes first, Patroni last). Thawing a member that is not
// frozen does nothing.
func (c *Cluster) Thaw(i int) error {
	m := c.member(i)
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	var last []int
	for _, pid := range m.frozen {
		if m.patroni != nil && pid == m.patroni.pid() {
			last = append(last, pid)
			continue
		}
		errs = append(errs, signalPid(pid, syscall.SIGCONT))
	}
	for _, pid := range last {
		errs = append(errs, signalPid(pid, syscall.SIGCONT))
	}
	m.frozen = nil
	return errors.Join(errs...)
}

func (c *Cluster) isFrozen(i int) bool {
	m := c.member(i)
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(m.frozen) > 0
}

// FreezeLeader freezes the leader (Freeze) past its TTL: it waits, frozen,
// until another member holds the leader key and accepts writes, then
// thaws the old leader and returns both. The old leader's Patroni finds it
// lost the key, demotes its PostgreSQL and rejoins as a replica (with
// pg_rewind when it had diverged); await that with WaitHealthy. Any error
// leaves the member thawed.
func (c *Cluster) FreezeLeader(ctx context.Context) (frozen, leader int, err error) {
	frozen, err = c.Leader(ctx)
	if err != nil {
		return -1, -1, err
	}
	if err := c.Freeze(frozen); err != nil {
		return frozen, -1, errors.Join(err, c.Thaw(frozen))
	}
	leader, err = c.WaitLeader(ctx, frozen)
	return frozen, leader, errors.Join(err, c.Thaw(frozen))
}
