package pgreplica

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
)

// The check an edge (pgreplicahttp's middleware, pgreplicagrpc's server
// interceptors, pgreplicajob's Extract) runs on a token from outside once
// it decoded: the token names a cluster the application uses, and no
// position its primary has not written (see unwritten.go).

// Reasons CheckToken refuses a token; each wraps ErrBadToken.
var (
	errTokenAhead   = badToken(errors.New("a position ahead of everything the primary has written"))
	errTokenForeign = badToken(errors.New("positions of other clusters only"))
)

// CheckToken reports whether t can be a token of a session that used c's
// cluster. It returns an error wrapping ErrBadToken when t has a position
// for c's cluster (or one whose cluster was not known, which applies to
// every cluster) that the cluster's primary has not written, or when t has
// positions and every one of them names another cluster (a token of
// another deployment). Otherwise, and when it cannot tell (no host
// answered, no primary to ask), it returns nil; ctx's error when ctx ends
// first.
//
// A position ahead of every one the process knows of the primary, such as
// that of a write another process made a moment ago, costs one statement
// on the primary, shared with concurrent checks; others cost none.
// Overflow is not a position and is not looked at: it costs a read no more
// than a position of the primary's newest write (see Token, "Positions no
// primary has written"). Use TokenCheck for several clusters.
func (c *Connector) CheckToken(ctx context.Context, t Token) error {
	return checkToken(ctx, t, []*Connector{c})
}

// TokenCheck returns a check of the tokens that come from outside for an
// application whose sessions use the clusters of dbs (their pgreplica
// handles): CheckToken over all of them, a position being checked on its
// own cluster's primary and one whose cluster was not known on every one
// (it must have been written by one of them). Give it to the Check option
// of pgreplicahttp, pgreplicagrpc or pgreplicajob. A db that is not a
// pgreplica handle fails every check (ConnectorOf's error).
func TokenCheck(dbs ...*sql.DB) func(ctx context.Context, t Token) error {
	cs := make([]atomic.Pointer[Connector], len(dbs))
	return func(ctx context.Context, t Token) error {
		conns := make([]*Connector, len(dbs))
		for i, db := range dbs {
			if conns[i] = cs[i].Load(); conns[i] != nil {
				continue
			}
			c, err := ConnectorOf(ctx, db)
			if err != nil {
				return err
			}
			cs[i].Store(c)
			conns[i] = c
		}
		return checkToken(ctx, t, conns)
	}
}

// checkToken is CheckToken over the clusters of cs.
func checkToken(ctx context.Context, t Token, cs []*Connector) error {
	type cluster struct {
		c    *Connector
		topo *topology
	}
	clusters := make([]cluster, 0, len(cs))
	unknown := false // a connector whose cluster is not known
	for _, c := range cs {
		if err := c.start(ctx); err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
		t := c.topo.Load()
		if t.sysid == 0 {
			unknown = true
			continue
		}
		clusters = append(clusters, cluster{c, t})
	}
	applies, foreign := false, false
	for i := range 1 + len(t.Others) {
		p := t.at(i)
		if p.LSN == 0 {
			continue // requires nothing
		}
		ok, matched := false, false
		for _, cl := range clusters {
			if p.SystemID != 0 && p.SystemID != cl.topo.sysid {
				continue
			}
			matched = true
			w, _, err := cl.c.written(ctx, cl.topo, p.LSN)
			if err != nil {
				return err
			}
			if w {
				ok = true
				break
			}
		}
		switch {
		case !matched && (p.SystemID == 0 || unknown):
			applies = true // no cluster to check it against
		case !matched:
			foreign = true
		case !ok:
			return errTokenAhead
		default:
			applies = true
		}
	}
	if foreign && !applies {
		return errTokenForeign
	}
	return nil
}
