//go:build linux

package patroni

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Role is what a server said it was when WatchRoles asked it.
type Role string

// Roles.
const (
	RolePrimary Role = "primary" // pg_is_in_recovery() is false
	RoleReplica Role = "replica" // in recovery
	RoleDown    Role = "down"    // no answer within the probe's timeout
)

// RoleEvent is a change of what one member's server said it was.
type RoleEvent struct {
	At     time.Time
	Member int
	Role   Role
	// Timeline is a primary's current timeline (from the name of the WAL
	// file it writes), or a replica's received timeline, 0 when unknown.
	Timeline int
	Err      string // for RoleDown, why
}

func (e RoleEvent) String() string {
	s := fmt.Sprintf("%s m%d %s", e.At.Format("15:04:05.000"), e.Member, e.Role)
	if e.Timeline > 0 {
		s += " timeline " + strconv.Itoa(e.Timeline)
	}
	if e.Err != "" {
		s += " (" + e.Err + ")"
	}
	return s
}

// RoleWatch asks every member's server what it is, every few
// milliseconds, on a connection of its own, and records each change.
type RoleWatch struct {
	c      *Cluster
	every  time.Duration
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	events   []RoleEvent
	watching map[int]bool
}

// WatchRoles starts watching every member (members added later too)
// every interval (default 20 ms); Stop ends it.
func (c *Cluster) WatchRoles(every time.Duration) *RoleWatch {
	if every <= 0 {
		every = 20 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &RoleWatch{c: c, every: every, cancel: cancel, watching: map[int]bool{}}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			for _, i := range c.Live() {
				w.mu.Lock()
				start := !w.watching[i]
				w.watching[i] = true
				w.mu.Unlock()
				if start {
					w.wg.Add(1)
					go func() { defer w.wg.Done(); w.watch(ctx, i) }()
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return w
}

// probeQuery tells a primary from a replica, and the timeline each is on.
const probeQuery = `SELECT pg_is_in_recovery(),
	CASE WHEN pg_is_in_recovery()
		THEN coalesce((SELECT received_tli FROM pg_stat_wal_receiver), 0)
		ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END`

func (w *RoleWatch) watch(ctx context.Context, i int) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	t := time.NewTicker(w.every)
	defer t.Stop()
	var last RoleEvent
	last.Member = -1
	for {
		ev := RoleEvent{Member: i, Role: RoleDown}
		pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		var err error
		if conn == nil {
			conn, err = w.c.connect(pctx, i)
		}
		if err == nil {
			var recovery bool
			err = conn.QueryRow(pctx, probeQuery).Scan(&recovery, &ev.Timeline)
			if err == nil {
				ev.Role = RoleReplica
				if !recovery {
					ev.Role = RolePrimary
				}
			}
		}
		cancel()
		ev.At = time.Now()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			ev.Err = firstLine(err.Error())
			if conn != nil {
				conn.Close(context.Background())
				conn = nil
			}
		}
		if ev.Role == RoleReplica && ev.Timeline == 0 && last.Role == RoleReplica {
			// Between two connections of its WAL receiver a replica
			// reports no received timeline: it is still on the last one.
			ev.Timeline = last.Timeline
		}
		if last.Member < 0 || ev.Role != last.Role || ev.Timeline != last.Timeline {
			w.mu.Lock()
			w.events = append(w.events, ev)
			w.mu.Unlock()
			last = ev
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// Stop ends the watch and returns its events in time order.
func (w *RoleWatch) Stop() []RoleEvent {
	w.cancel()
	w.wg.Wait()
	return w.Events()
}

// Events returns the changes seen so far, in time order.
func (w *RoleWatch) Events() []RoleEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := slices.Clone(w.events)
	slices.SortStableFunc(out, func(a, b RoleEvent) int { return a.At.Compare(b.At) })
	return out
}

// Promotion is a member seen as a primary on a timeline newer than any
// seen before: the moment (at the watch's resolution) a manager's
// promotion took effect.
type Promotion struct {
	At       time.Time
	Member   int
	Timeline int
}

// Promotions returns the promotions among events: each time a member
// answers as a primary on a timeline higher than any primary was seen on
// before. The first primary seen counts as one. (Replicas' timelines do
// not count: a replica that follows the new primary may answer before the
// new primary itself does.)
func Promotions(events []RoleEvent) []Promotion {
	var out []Promotion
	top := 0
	for _, e := range events {
		if e.Role == RolePrimary && e.Timeline > top {
			out = append(out, Promotion{At: e.At, Member: e.Member, Timeline: e.Timeline})
			top = e.Timeline
		}
	}
	return out
}

// Overlap is a stretch of time in which two members answered as primaries.
type Overlap struct {
	From, To time.Time
	Members  []int
}

// Overlaps returns the stretches of events in which more than one member
// answered as a primary (a split brain as the servers themselves saw it,
// at the watch's resolution).
func Overlaps(events []RoleEvent) []Overlap {
	var out []Overlap
	role := map[int]Role{}
	var cur *Overlap
	for _, e := range events {
		role[e.Member] = e.Role
		var prim []int
		for m, r := range role {
			if r == RolePrimary {
				prim = append(prim, m)
			}
		}
		slices.Sort(prim)
		switch {
		case len(prim) > 1 && cur == nil:
			cur = &Overlap{From: e.At, Members: prim}
		case len(prim) > 1:
			for _, m := range prim {
				if !slices.Contains(cur.Members, m) {
					cur.Members = append(cur.Members, m)
				}
			}
		case cur != nil:
			cur.To = e.At
			out = append(out, *cur)
			cur = nil
		}
	}
	if cur != nil {
		cur.To = time.Now()
		out = append(out, *cur)
	}
	return out
}
