package pgreplica

// Selection is a chain of small filters over a topology snapshot, in the
// manner of MongoDB's server selection:
//
//	healthy → same cluster and timeline → sync-standby rule → suspect
//	→ lag or staleness bound → replay ≥ needed position → zone → picker
//
// The first filters depend only on the snapshot and run once per build
// (topology.exclusion); the others run per read (plan.reject). Each names
// its rejection, so Nodes() and `pgreplica status` explain a host with the
// same code that routes. Nothing here locks or allocates.

// choose picks a node of set with the connector's Picker, which is not
// read when there is one candidate (it is a cache line away).
func (r *router) choose(t *topology, set nodeSet) int {
	if set&(set-1) == 0 {
		return set.nth(0)
	}
	return pick(r.picker, t, set)
}

// pick applies p to the set and returns a node index.
func pick(p Picker, t *topology, set nodeSet) int {
	c := Candidates{nodes: t, set: set}
	k := p.Pick(c)
	if k < 0 || k >= set.len() {
		k = 0
	}
	return set.nth(k)
}
