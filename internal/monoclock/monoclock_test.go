package monoclock

import (
	"testing"
	"time"
)

// TestClock: readings move forward, and a time.Now reading put on the
// clock lands between the clock readings around it.
func TestClock(t *testing.T) {
	a := Now()
	wall := time.Now()
	b := Now()
	if b < a {
		t.Fatalf("clock went back: %d then %d", a, b)
	}
	if w := Of(wall); w < a || w > b {
		t.Errorf("Of(time.Now()) = %d, not within [%d, %d]", w, a, b)
	}
	if d := b.Sub(a); d < 0 || d != time.Duration(b-a) {
		t.Errorf("Sub = %v", d)
	}
	if Of(wall.Add(time.Second)).Sub(Of(wall)) != time.Second {
		t.Error("a second on the wall clock is not a second on this one")
	}
}
