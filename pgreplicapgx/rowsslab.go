package pgreplicapgx

import "sync/atomic"

// rowsSlab hands out the rows of queries from arrays of rowsPerSlab, as
// pgxpool hands out its wrappers of pgx's rows from arrays kept per
// connection: one allocation for many queries. A rows is never reused
// (the caller may read Err or CommandTag after Close); a slab is freed
// once none of its rows is referenced.
type rowsSlab struct {
	next atomic.Uint32
	rows [rowsPerSlab]rows
}

const rowsPerSlab = 64

// newRows returns a zero rows from the pool's current slab, starting a
// new slab when it is used up.
func (p *Pool) newRows() *rows {
	for {
		s := p.slab.Load()
		if s != nil {
			if i := s.next.Add(1) - 1; i < rowsPerSlab {
				return &s.rows[i]
			}
		}
		p.slab.CompareAndSwap(s, new(rowsSlab))
	}
}
