package integration

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"
)

// PauseReplay pauses WAL replay on replica i (pg_wal_replay_pause) and
// returns once the replica reports it paused: from then on, nothing written
// on the primary becomes visible there until ResumeReplay. The replica keeps
// receiving WAL meanwhile.
func (c *Cluster) PauseReplay(ctx context.Context, i int) error {
	if err := c.Exec(ctx, i, "SELECT pg_wal_replay_pause()"); err != nil {
		return err
	}
	if c.srv.major() >= 14 {
		return c.waitValue(ctx, i, fmt.Sprintf("replay on node %d to pause", i),
			"SELECT pg_get_wal_replay_pause_state()", "paused")
	}
	return c.waitValue(ctx, i, fmt.Sprintf("replay on node %d to pause", i),
		"SELECT pg_is_wal_replay_paused()", "t")
}

// ResumeReplay resumes WAL replay on replica i (pg_wal_replay_resume) and
// returns once the replica replays again.
func (c *Cluster) ResumeReplay(ctx context.Context, i int) error {
	if err := c.Exec(ctx, i, "SELECT pg_wal_replay_resume()"); err != nil {
		return err
	}
	if c.srv.major() < 14 {
		// Before PostgreSQL 14 a paused startup process looks at the
		// pause flag once a second (pg_usleep in recoveryPausesHere):
		// replay goes on up to a second after pg_is_wal_replay_paused()
		// turned false. It has gone on once the startup process no longer
		// waits in RecoveryPause.
		return c.waitValue(ctx, i, fmt.Sprintf("replay on node %d to resume", i),
			"SELECT NOT pg_is_wal_replay_paused() AND coalesce((SELECT wait_event FROM pg_stat_activity "+
				"WHERE backend_type = 'startup'), '') <> 'RecoveryPause'", "t")
	}
	return c.waitValue(ctx, i, fmt.Sprintf("replay on node %d to resume", i),
		"SELECT pg_is_wal_replay_paused()", "f")
}

// SetApplyDelay sets recovery_min_apply_delay on replica i (ALTER SYSTEM
// and a configuration reload; it survives restarts) and returns once the
// server shows the new value. Each transaction then becomes visible on the
// replica no sooner than d after it committed on the primary. d is rounded
// up to whole milliseconds; 0 removes the delay.
func (c *Cluster) SetApplyDelay(ctx context.Context, i int, d time.Duration) error {
	if d < 0 {
		return errors.New("integration: negative apply delay")
	}
	ms := int64((d + time.Millisecond - 1) / time.Millisecond)
	conn, err := c.connect(ctx, i)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	// ALTER SYSTEM refuses to run in a (possibly implicit) transaction
	// block, so it gets a statement of its own.
	for _, sql := range []string{
		fmt.Sprintf("ALTER SYSTEM SET recovery_min_apply_delay = '%dms'", ms),
		"SELECT pg_reload_conf()",
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return fmt.Errorf("integration: node %d: %s: %w", i, sql, err)
		}
	}
	return c.waitValue(ctx, i, fmt.Sprintf("recovery_min_apply_delay on node %d", i),
		"SELECT setting FROM pg_settings WHERE name = 'recovery_min_apply_delay'", strconv.FormatInt(ms, 10))
}

// waitValue polls a one-value query on node i until it returns want.
func (c *Cluster) waitValue(ctx context.Context, i int, what, sql, want string) error {
	cs := c.newConns()
	defer cs.close()
	return poll(ctx, what, func(ctx context.Context) (bool, string, error) {
		got, err := cs.queryString(ctx, i, sql)
		if err != nil {
			if transient(err) {
				return false, err.Error(), nil
			}
			return false, "", err
		}
		return got == want, fmt.Sprintf("%s = %q", sql, got), nil
	})
}

// PauseReplicas pauses replay on every running replica, like PauseReplay,
// and resumes it when t's test ends. The returned function resumes replay
// earlier; calling it more than once is harmless. Failures fail t.
func (c *Cluster) PauseReplicas(t testing.TB) (resume func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var paused []int
	resume = func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, i := range paused {
			if err := c.ResumeReplay(ctx, i); err != nil {
				t.Errorf("resuming replay on node %d: %v", i, err)
			}
		}
	}
	t.Cleanup(resume)
	for _, i := range c.replicas() {
		if err := c.PauseReplay(ctx, i); err != nil {
			t.Fatalf("pausing replay on node %d: %v", i, err)
		}
		paused = append(paused, i)
	}
	return resume
}

// replicas returns the indexes of the running replicas.
func (c *Cluster) replicas() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var idx []int
	for _, n := range c.nodes {
		if n.running && n.standby {
			idx = append(idx, n.index)
		}
	}
	return idx
}
