package tokenwire

// Add max-merges p into f, one position per cluster within the bound: a
// position of a cluster f holds replaces it when its LSN is higher (on
// equal LSNs the one there stays); a new cluster is appended, or, past
// MaxClusters clusters with a SystemID, sets Overflow instead. It reports
// whether f changed. Fields built by Add alone keep the invariant Encode
// relies on, in the order the clusters were met.
func (f *Fields) Add(p Position) bool {
	known := 0
	for i := range f.Pos[:f.N] {
		q := &f.Pos[i]
		if q.SystemID == p.SystemID {
			if p.LSN > q.LSN {
				*q = p
				return true
			}
			return false
		}
		if q.SystemID != 0 {
			known++
		}
	}
	if p.SystemID != 0 && known == MaxClusters {
		changed := !f.Overflow
		f.Overflow = true
		return changed
	}
	f.Pos[f.N] = p
	f.N++
	return true
}
