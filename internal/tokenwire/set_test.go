package tokenwire

import "testing"

// Add keeps one position per cluster, the highest LSN (the first on a
// tie), and overflows past MaxClusters clusters with a SystemID; a
// position whose cluster is not known always has its place.
func TestAdd(t *testing.T) {
	var f Fields
	steps := []struct {
		p       Position
		changed bool
	}{
		{Position{LSN: 10, SystemID: 1}, true},
		{Position{LSN: 5, SystemID: 1}, false},
		{Position{LSN: 10, Timeline: 9, SystemID: 1}, false},
		{Position{LSN: 11, Timeline: 2, SystemID: 1}, true},
		{Position{LSN: 3}, true},
	}
	for i, s := range steps {
		if got := f.Add(s.p); got != s.changed {
			t.Errorf("step %d: Add(%+v) = %v, want %v", i, s.p, got, s.changed)
		}
	}
	if f.N != 2 || f.Pos[0] != (Position{LSN: 11, Timeline: 2, SystemID: 1}) || f.Pos[1] != (Position{LSN: 3}) {
		t.Fatalf("fields %+v", f.Pos[:f.N])
	}
	for id := uint64(2); id <= MaxClusters; id++ {
		f.Add(Position{LSN: id, SystemID: id})
	}
	if f.N != MaxPositions || f.Overflow {
		t.Fatalf("%d positions, overflow %v before the bound", f.N, f.Overflow)
	}
	if !f.Add(Position{LSN: 1, SystemID: 99}) || !f.Overflow || f.N != MaxPositions {
		t.Fatalf("past the bound: %d positions, overflow %v", f.N, f.Overflow)
	}
	if f.Add(Position{LSN: 1, SystemID: 100}) {
		t.Error("a second cluster past the bound changed the fields")
	}
}
