package pgreplica

import "math/bits"

// nodeSet is a set of node indexes (Config allows at most maxHosts hosts).
type nodeSet uint64

func (s nodeSet) has(i int) bool            { return s&(1<<uint(i)) != 0 }
func (s *nodeSet) add(i int)                { *s |= 1 << uint(i) }
func (s nodeSet) len() int                  { return bits.OnesCount64(uint64(s)) }
func (s nodeSet) without(o nodeSet) nodeSet { return s &^ o }

// nth returns the index of the k-th member (k < s.len()).
func (s nodeSet) nth(k int) int {
	for ; k > 0; k-- {
		s &= s - 1 // drop the lowest member
	}
	return bits.TrailingZeros64(uint64(s))
}
