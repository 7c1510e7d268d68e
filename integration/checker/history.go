package checker

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pgreplica/pgreplica"
)

// OpKind tells a write from a read.
type OpKind uint8

// Operation kinds.
const (
	OpWrite OpKind = iota + 1
	OpRead
)

func (k OpKind) String() string {
	switch k {
	case OpWrite:
		return "write"
	case OpRead:
		return "read"
	}
	return fmt.Sprintf("OpKind(%d)", uint8(k))
}

// Key names one row of the workload's table: the session that owns (and
// alone writes) it, and its number among that session's rows.
type Key struct {
	Owner, N int
}

func (k Key) String() string { return fmt.Sprintf("(%d,%d)", k.Owner, k.N) }

func compareKeys(a, b Key) int {
	return cmp.Or(cmp.Compare(a.Owner, b.Owner), cmp.Compare(a.N, b.N))
}

// Op is one operation of the history.
type Op struct {
	// Session is the workload session that ran the operation and Seq its
	// position in that session's sequence (sessions are sequential).
	Session, Seq int
	Kind         OpKind
	// Path is how it ran: for a write "exec", "returning" or "tx"; for a
	// read "query", "ro-tx" or, through the pgx-native handle, "batch".
	Path string
	// Role is why the workload made it: "write", "own-now" (a read of the
	// row just written), "own-later" (a read of one of the session's rows
	// written earlier), "other" and "other-again" (reads of another
	// session's row), "other-later" (a read, one round later, of the other
	// session's row read in the previous round), "refresh" (a re-read of
	// another session's row the primary served).
	Role string
	Key  Key
	// Version is the version written, or the version read (0 is the
	// initial row).
	Version    int
	Start, End time.Time
	// Node is the harness index of the node that served the operation, or
	// -1 when unknown (writes sent with Exec do not report it).
	Node int
	// ReplayLSN is the serving replica's pg_last_wal_replay_lsn() while it
	// ran the read, 0 on the primary. The read's snapshot is at or before
	// this position.
	ReplayLSN pgreplica.LSN
	// InSession reports that the operation's context carried the workload
	// session's pgreplica.Session (see Target).
	InSession bool
	// WatermarkBefore and WatermarkAfter are the workload session's
	// pgreplica watermark around the operation (0 for the naive router).
	// After a write in the session WatermarkAfter is at least the LSN the
	// driver captured for it.
	WatermarkBefore, WatermarkAfter pgreplica.LSN
	// Err is the operation's error; a failed operation is in the history
	// but is not used to judge others.
	Err error
}

// Own reports whether the operation touched a row of its own session.
func (o *Op) Own() bool { return o.Key.Owner == o.Session }

// String describes the operation with everything needed to diagnose it.
func (o *Op) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "session %d #%d %s/%s key %s v%d", o.Session, o.Seq, o.Role, o.Path, o.Key, o.Version)
	if o.Node >= 0 {
		fmt.Fprintf(&b, " on node %d", o.Node)
	}
	if o.ReplayLSN != 0 {
		fmt.Fprintf(&b, " replay %s", o.ReplayLSN)
	}
	if o.WatermarkBefore != 0 || o.WatermarkAfter != 0 {
		fmt.Fprintf(&b, " watermark %s→%s", o.WatermarkBefore, o.WatermarkAfter)
	}
	fmt.Fprintf(&b, " at %s (took %s)", o.Start.Format("15:04:05.000000"), o.End.Sub(o.Start).Round(time.Microsecond))
	if o.Err != nil {
		fmt.Fprintf(&b, " error: %v", o.Err)
	}
	return b.String()
}

// History is every operation of a run.
type History struct {
	Ops []Op
}

// merge builds a history from the sessions' own logs, ordered by start
// time (each session's log is already in its own order).
func merge(logs [][]Op) History {
	var h History
	for _, l := range logs {
		h.Ops = append(h.Ops, l...)
	}
	slices.SortStableFunc(h.Ops, func(a, b Op) int { return a.Start.Compare(b.Start) })
	return h
}
