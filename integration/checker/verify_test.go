package checker

import (
	"errors"
	"testing"
	"time"
)

// history builds a history from ops given in each session's order, with
// start times in that order and Seq set per session.
func history(ops ...Op) History {
	t0 := time.Unix(1_700_000_000, 0)
	seq := map[int]int{}
	for i := range ops {
		ops[i].Start = t0.Add(time.Duration(2*i) * time.Millisecond)
		ops[i].End = ops[i].Start.Add(time.Millisecond)
		ops[i].Seq = seq[ops[i].Session]
		seq[ops[i].Session]++
	}
	return History{Ops: ops}
}

func w(session, key, version int) Op {
	return Op{Session: session, Kind: OpWrite, Key: Key{session, key}, Version: version, Node: -1}
}

func rd(session int, key Key, version int) Op {
	return Op{Session: session, Kind: OpRead, Key: key, Version: version, Node: 1}
}

func kinds(vs []Violation) []Kind {
	var out []Kind
	for _, v := range vs {
		out = append(out, v.Kind)
	}
	return out
}

func TestCheck(t *testing.T) {
	failed := w(0, 0, 2)
	failed.Err = errors.New("connection lost")
	cases := []struct {
		name string
		h    History
		want []Kind
	}{
		{"clean", history(w(0, 0, 1), rd(0, Key{0, 0}, 1), w(1, 0, 1), rd(0, Key{1, 0}, 1), rd(0, Key{1, 0}, 1)), nil},
		{"stale own read", history(w(0, 0, 1), rd(0, Key{0, 0}, 0)), []Kind{ReadYourWrites}},
		{"stale later own read", history(w(0, 0, 1), rd(0, Key{0, 0}, 1), w(0, 1, 1), rd(0, Key{0, 0}, 0)),
			[]Kind{ReadYourWrites, MonotonicRead}},
		{"other's row goes back", history(w(1, 0, 1), w(1, 0, 2), rd(0, Key{1, 0}, 2), rd(0, Key{1, 0}, 1)), []Kind{MonotonicRead}},
		{"other's row moves on", history(w(1, 0, 1), rd(0, Key{1, 0}, 0), w(1, 0, 2), rd(0, Key{1, 0}, 2)), nil},
		{"other sessions may differ", history(w(1, 0, 1), rd(0, Key{1, 0}, 1), rd(2, Key{1, 0}, 0)), nil},
		{"failed write may have committed", history(w(0, 0, 1), failed, rd(0, Key{0, 0}, 2)), nil},
		{"failed write is not a requirement", history(w(0, 0, 1), failed, rd(0, Key{0, 0}, 1)), nil},
		{"never written", history(w(0, 0, 1), rd(0, Key{0, 0}, 5)), []Kind{Impossible}},
		{"read before the write", history(rd(0, Key{1, 0}, 1), w(1, 0, 1)), []Kind{Impossible}},
		{"failed reads are ignored", history(w(0, 0, 1), Op{Session: 0, Kind: OpRead, Key: Key{0, 0}, Err: errors.New("x")}), nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := kinds(Check(c.h))
			if len(got) != len(c.want) {
				t.Fatalf("violations %v, want %v", got, c.want)
			}
			for i := range got {
				if got[i] != c.want[i] {
					t.Fatalf("violations %v, want %v", got, c.want)
				}
			}
		})
	}
}

func TestCheckNamesTheCause(t *testing.T) {
	h := history(w(1, 0, 1), w(1, 0, 2), rd(0, Key{1, 0}, 2), rd(0, Key{1, 0}, 1))
	v := Check(h)
	if len(v) != 1 || v[0].Cause.Seq != 0 || v[0].Cause.Session != 0 || v[0].Read.Seq != 1 {
		t.Fatalf("got %+v, want the first read of session 0 as the cause", v)
	}
}

func TestCheckWatermarks(t *testing.T) {
	outside := w(0, 0, 4) // no session: nothing to raise
	raised := w(0, 0, 1)
	raised.WatermarkBefore, raised.WatermarkAfter = 0x100, 0x200
	flat := w(0, 0, 2)
	flat.WatermarkBefore, flat.WatermarkAfter = 0x200, 0x200
	failed := w(0, 0, 3)
	failed.WatermarkBefore, failed.WatermarkAfter, failed.Err = 0x200, 0x200, errors.New("x")
	read := rd(0, Key{0, 0}, 2)
	read.WatermarkBefore, read.WatermarkAfter = 0x200, 0x200
	for _, op := range []*Op{&raised, &flat, &failed, &read} {
		op.InSession = true
	}
	v := CheckWatermarks(history(raised, flat, failed, read, outside))
	if len(v) != 1 || v[0].Kind != UncoveredWrite || v[0].Wrote.Version != 2 {
		t.Fatalf("got %v, want the write of v2 only", v)
	}
}
