package checker

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Kind is a class of consistency violation.
type Kind string

// Violation kinds.
const (
	// ReadYourWrites: a session read its own row and saw a version lower
	// than the last version it had written (and seen committed) before the
	// read started.
	ReadYourWrites Kind = "read-your-writes"
	// MonotonicRead: a session read a row and saw a version lower than one
	// it had read for that row before.
	MonotonicRead Kind = "monotonic-read"
	// Impossible: a read returned a version that no write had produced
	// before the read ended. It means the checker or the cluster is broken,
	// not the router.
	Impossible Kind = "impossible-read"
	// UncoveredWrite: a write through a pgreplica Session completed without
	// raising the session's watermark (see CheckWatermarks). No read has
	// gone wrong yet, but the session's later reads are not guaranteed to
	// see the write.
	UncoveredWrite Kind = "uncovered-write"
)

// Violation is one read that broke a guarantee, with the operation that
// established what it should have seen.
type Violation struct {
	Kind Kind
	// Read is the offending read.
	Read Op
	// Cause is the session's last completed write of the row
	// (ReadYourWrites) or its earlier read that saw the higher version
	// (MonotonicRead); zero for Impossible.
	Cause Op
	// Wrote is the write of the version the read should have seen at
	// least: Cause itself for ReadYourWrites, the write of the earlier
	// read's version for MonotonicRead (zero when the history lacks it).
	// Its WatermarkAfter bounds that commit's LSN from above.
	Wrote Op
}

func (v Violation) String() string {
	switch v.Kind {
	case ReadYourWrites:
		return fmt.Sprintf("%s: read v%d after writing v%d\n    read:  %s\n    write: %s", v.Kind, v.Read.Version, v.Cause.Version, &v.Read, &v.Cause)
	case MonotonicRead:
		return fmt.Sprintf("%s: read v%d after reading v%d\n    read:    %s\n    earlier: %s\n    written: %s", v.Kind, v.Read.Version, v.Cause.Version, &v.Read, &v.Cause, &v.Wrote)
	}
	if v.Kind == UncoveredWrite {
		return fmt.Sprintf("%s: the session's watermark did not rise\n    write: %s", v.Kind, &v.Wrote)
	}
	return fmt.Sprintf("%s: %s", v.Kind, &v.Read)
}

// at is when the violation happened: its read, or its write.
func (v *Violation) at() time.Time {
	if v.Kind == UncoveredWrite {
		return v.Wrote.Start
	}
	return v.Read.Start
}

// Check verifies a history and returns its violations in the order of the
// offending reads. Failed operations are ignored, except that a failed
// write may have committed, so the version it tried to write is not
// impossible to read.
//
// Sessions are sequential: every operation of a session completed before
// its next one started. So "before the read started" is "earlier in the
// session's sequence".
func Check(h History) []Violation {
	attempted := make(map[Key]map[int]*Op) // key → version → write that tried it
	bySession := make(map[int][]*Op)
	for i := range h.Ops {
		op := &h.Ops[i]
		bySession[op.Session] = append(bySession[op.Session], op)
		if op.Kind == OpWrite {
			if attempted[op.Key] == nil {
				attempted[op.Key] = make(map[int]*Op)
			}
			attempted[op.Key][op.Version] = op
		}
	}
	var out []Violation
	for _, ops := range bySession {
		slices.SortFunc(ops, func(a, b *Op) int { return cmp.Compare(a.Seq, b.Seq) })
		written := make(map[Key]*Op) // last completed write per own row
		seen := make(map[Key]*Op)    // read that saw the highest version per row
		for _, op := range ops {
			if op.Err != nil {
				continue
			}
			if op.Kind == OpWrite {
				written[op.Key] = op
				continue
			}
			if op.Version > 0 {
				if w := attempted[op.Key][op.Version]; w == nil || !w.Start.Before(op.End) {
					out = append(out, Violation{Kind: Impossible, Read: *op})
				}
			}
			if w := written[op.Key]; w != nil && op.Own() && op.Version < w.Version {
				out = append(out, Violation{Kind: ReadYourWrites, Read: *op, Cause: *w, Wrote: *w})
			}
			if r := seen[op.Key]; r != nil && op.Version < r.Version {
				v := Violation{Kind: MonotonicRead, Read: *op, Cause: *r}
				if w := attempted[op.Key][r.Version]; w != nil {
					v.Wrote = *w
				}
				out = append(out, v)
			}
			if r := seen[op.Key]; r == nil || op.Version > r.Version {
				seen[op.Key] = op
			}
		}
	}
	slices.SortStableFunc(out, func(a, b Violation) int { return a.Read.Start.Compare(b.Read.Start) })
	return out
}

// CheckWatermarks verifies that every successful write that carried a
// pgreplica Session (Op.InSession) raised the session's watermark, and
// returns an UncoveredWrite violation (with Wrote set) for each that did
// not. A write's commit ends past every position the primary
// or a replica had reached before the write began, so the LSN captured
// after it must exceed whatever the watermark held.
func CheckWatermarks(h History) []Violation {
	var out []Violation
	for i := range h.Ops {
		op := &h.Ops[i]
		if op.Kind == OpWrite && op.InSession && op.Err == nil && op.WatermarkAfter <= op.WatermarkBefore {
			out = append(out, Violation{Kind: UncoveredWrite, Wrote: *op})
		}
	}
	return out
}
