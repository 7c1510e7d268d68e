package pgreplica

import (
	"testing"
	"unsafe"
)

// cacheLine is the x86-64 and arm64 (most servers') cache line.
const cacheLine = 64

// TestHotFieldsLayout pins the layout the benchmarks rely on (see the
// comments on Connector, node, physical and settings): what every
// statement reads stays in the cache lines those comments promise, so a
// new field in the wrong place fails here rather than in a benchmark.
func TestHotFieldsLayout(t *testing.T) {
	end := func(off, size uintptr) uintptr { return off + size }
	var c Connector
	var m metrics
	var n node
	var p physical
	for _, tc := range []struct {
		what  string
		end   uintptr
		lines uintptr
	}{
		// A statement's reads of the connector: its first fields, the
		// settings, the logger and the counters most reads add.
		{"Connector up to metrics.primaryReads", end(unsafe.Offsetof(c.metrics)+unsafe.Offsetof(m.primaryReads), unsafe.Sizeof(m.primaryReads)), 3},
		{"settings", unsafe.Sizeof(settings{}), 1},
		// Selection and borrows: a node's hot fields, read live.
		{"node up to perConn", end(unsafe.Offsetof(n.perConn), unsafe.Sizeof(n.perConn)), 1},
		// Every borrow: a physical connection's first fields.
		{"physical up to lent", end(unsafe.Offsetof(p.lent), unsafe.Sizeof(p.lent)), 1},
	} {
		if tc.end > tc.lines*cacheLine {
			t.Errorf("%s ends at byte %d: past %d cache line(s) (%d bytes)", tc.what, tc.end, tc.lines, tc.lines*cacheLine)
		}
	}
}
