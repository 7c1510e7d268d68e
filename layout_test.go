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

// TestConnectorPartsLayout pins how the connector's named parts sit
// around its hot lines: the parts in them keep the size those lines were
// counted with (a field added to the hedger would push the counters
// out), and the parts that serve only some statements (the fallback gate,
// the capturer) come after the counters, never between hot fields.
func TestConnectorPartsLayout(t *testing.T) {
	var c Connector
	word := unsafe.Sizeof(uintptr(0))
	for _, tc := range []struct {
		what       string
		size, want uintptr
	}{
		{"hedger", unsafe.Sizeof(c.hedges), 2 * word},
		{"statementSet", unsafe.Sizeof(c.refused), 16},
	} {
		if tc.size != tc.want {
			t.Errorf("%s takes %d bytes of the connector's hot lines, want %d", tc.what, tc.size, tc.want)
		}
	}
	counters := unsafe.Offsetof(c.metrics) + unsafe.Sizeof(c.metrics)
	for _, tc := range []struct {
		what string
		off  uintptr
	}{
		{"fallbackGate", unsafe.Offsetof(c.fallbacks)},
		{"capturer", unsafe.Offsetof(c.capture)},
	} {
		if tc.off < counters {
			t.Errorf("%s starts at byte %d, before the end of the counters (byte %d): keep it out of the hot lines", tc.what, tc.off, counters)
		}
	}
}
