package checker

import (
	"context"
	"fmt"
	"time"
)

// A replica can show a commit the primary does not show yet: the primary
// makes a commit visible when the transaction leaves its process array,
// after its commit record went to the replicas and after its synchronous
// standby answered. With a synchronous standby whose replay the injector
// pauses, and commits that wait for it to apply (remote_apply), that
// window stays open for the length of a pause, while the asynchronous
// replicas already show the commit: a session that read a row there and
// then reads it on the primary (right after its own write, by default)
// can see it go back in time. Faults.SyncStandby turns it on.

// syncCommit is the workload's synchronous_commit with Faults.SyncStandby.
const syncCommit = "remote_apply"

// setSyncStandby makes the first replica (by application name) the
// primary's synchronous standby, or none, and waits until the primary
// says so.
func setSyncStandby(ctx context.Context, cl Cluster, on bool) error {
	p := cl.Primary()
	name, err := cl.QueryString(ctx, p, "SELECT application_name FROM pg_stat_replication ORDER BY application_name LIMIT 1")
	if err != nil || name == "" {
		return fmt.Errorf("checker: no replica streams to be the synchronous standby: %v", err)
	}
	set, want := "ALTER SYSTEM RESET synchronous_standby_names", "async"
	if on {
		set, want = fmt.Sprintf("ALTER SYSTEM SET synchronous_standby_names = '\"%s\"'", name), "sync"
	}
	if err := cl.Exec(ctx, p, set); err != nil {
		return fmt.Errorf("checker: %s: %w", set, err)
	}
	if err := cl.Exec(ctx, p, "SELECT pg_reload_conf()"); err != nil {
		return fmt.Errorf("checker: reloading the primary: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, faultStep)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		got, err := cl.QueryString(ctx, p, "SELECT sync_state FROM pg_stat_replication WHERE application_name = $1", name)
		if err == nil && got == want {
			return nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("checker: %s is %q on the primary, want %q: %w", name, got, want, ctx.Err())
		}
	}
}

// syncParams are the DSN parameters of the workload's connections: their
// commits wait for the synchronous standby to apply them.
func syncParams(o *Options) []string {
	if !o.Faults.SyncStandby {
		return nil
	}
	return []string{"synchronous_commit", syncCommit}
}
