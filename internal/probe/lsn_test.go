package probe

import "testing"

func TestReachableLSN(t *testing.T) {
	for _, tc := range []struct{ in, want uint64 }{
		{0x1000018, 0xFFFFDF}, // past a short page header
		{0x1002018, 0x1001FDF},
		{0x1000028, 0xFFFFDF},  // past a segment's long header
		{0x1002028, 0x1002028}, // 40 bytes into a page that is not a segment start: data
		{0x1002019, 0x1002019},
		{0x1002000, 0x1001FDF}, // a boundary a record may span
		{0x1001FE0, 0x1001FE0},
		{0, 0},
	} {
		if got := ReachableLSN(tc.in); got != tc.want {
			t.Errorf("ReachableLSN(%s) = %s, want %s", AppendLSN(nil, tc.in), AppendLSN(nil, got), AppendLSN(nil, tc.want))
		}
	}
}
