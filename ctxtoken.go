package pgreplica

import (
	"context"
	"slices"
	"time"
)

// Requirements in context: the With* functions store what a statement
// needs to see in its context; requirementFrom reads it back for decide.

// requirementKey is the one context key under which every With* function
// stores the current *requirement.
type requirementKey struct{}

// requirement is everything a context asks of a read. A stored requirement
// is never modified: every With* function copies the current one, changes
// the copy and stores it, so the driver needs one ctx.Value lookup per
// statement and a derived context never affects its parent.
type requirement struct {
	session      *Session      // WithSession: read-your-writes + monotonic reads; the driver advances it
	minLSN       LSN           // WithMinLSN: replica must have replayed ≥ this, on any cluster
	token        *Token        // WithToken: every token's positions, merged per cluster; never modified once stored
	primary      bool          // WithPrimary: must be current
	eventual     bool          // WithEventual: any healthy replica, ignore the process default
	maxStaleness time.Duration // WithMaxStaleness: replica time lag ≤ d (0 = unset)
	fallback     *Fallback     // WithFallback; nil: the connector's Config.Fallback
	replicated   int           // WithReplicated: writes wait for this many replicas
}

// requirementFrom returns the context's requirement, or nil when it has
// none. The result must not be modified.
func requirementFrom(ctx context.Context) *requirement {
	r, _ := ctx.Value(requirementKey{}).(*requirement)
	return r
}

// withRequirement stores a modified copy of ctx's requirement.
func withRequirement(ctx context.Context, change func(*requirement)) context.Context {
	var r requirement
	if cur := requirementFrom(ctx); cur != nil {
		r = *cur
	}
	change(&r)
	return context.WithValue(ctx, requirementKey{}, &r)
}

// WithSession returns a context whose reads and writes belong to s:
// read-your-writes and monotonic reads for everything done with s (see
// Session). It replaces any session ctx already had; a nil s removes it.
// Other requirements in ctx are kept.
//
// Requirements combine by precedence, strongest first:
//
//  1. WithPrimary: the read runs on the primary; nothing else matters.
//  2. A position: the read needs a replica that replayed the highest of
//     the session's watermark for the read's cluster (WithSession), the
//     token positions that apply to that cluster (WithToken) and the
//     minimum LSN (WithMinLSN). A session with a zero watermark still
//     makes this the deciding requirement (any healthy replica, then
//     monotonic).
//  3. WithMaxStaleness: any replica whose time lag is at most d.
//  4. WithEventual: any healthy replica.
//  5. None of these: the connector's default (Config.Consistency).
//
// Only the strongest requirement present decides; a weaker one never
// relaxes it. WithFallback applies whichever requirement decides.
func WithSession(ctx context.Context, s *Session) context.Context {
	return withRequirement(ctx, func(r *requirement) { r.session = s })
}

// SessionFrom returns the session WithSession attached to ctx, or nil.
func SessionFrom(ctx context.Context) *Session {
	if r := requirementFrom(ctx); r != nil {
		return r.session
	}
	return nil
}

// WithMinLSN returns a context whose reads must see at least lsn: a replica
// qualifies only once it has replayed lsn. Use it for a position that came
// from outside (a cookie, a header, a job payload). The position names no
// cluster, so it applies to reads on every cluster; a Token (WithToken)
// keeps its positions per cluster. It max-merges with a minimum ctx
// already had, so it never lowers one; the zero LSN adds no requirement.
// See WithSession for how requirements combine.
func WithMinLSN(ctx context.Context, lsn LSN) context.Context {
	return withRequirement(ctx, func(r *requirement) { r.minLSN = max(r.minLSN, lsn) })
}

// WithToken returns a context whose reads must see the token's positions,
// each on its own cluster: a read on cluster X needs a replica that
// replayed the token's position for X (Token.LSNFor), a position for
// another cluster does not apply to it, and a position with SystemID 0
// (cluster not known) applies on every cluster, as WithMinLSN does. It
// max-merges per cluster with tokens ctx already had (Token.Merge), so it
// never lowers one; a token that requires nothing adds no requirement. See
// WithSession for how requirements combine. The token itself is assumed
// valid, its Expires is not looked at: parse it with ParseToken or
// TokenCodec.Decode first, and check one from outside with CheckToken. A
// position ahead of everything the primary has written is never waited
// for (see Token, "Positions no primary has written").
func WithToken(ctx context.Context, t Token) context.Context {
	return withRequirement(ctx, func(r *requirement) {
		merged := t
		if r.token != nil {
			merged, _ = r.token.Merge(t)
		} else {
			// Stored for the life of the context: no slice of the
			// caller's.
			merged.Others = slices.Clone(t.Others)
		}
		merged.Expires = time.Time{}
		r.token = &merged
	})
}

// WithPrimary returns a context whose reads run on the primary ("must be
// current"). Use it for a read that decides a write (a balance, a stock
// level, a uniqueness check); better still, run both in one read-write
// transaction, which always runs on the primary. It takes precedence over
// every other requirement (see WithSession).
func WithPrimary(ctx context.Context) context.Context {
	return withRequirement(ctx, func(r *requirement) { r.primary = true })
}

// WithEventual returns a context whose reads may use any healthy replica,
// ignoring the connector's default consistency (for example the process
// read-your-writes watermark). It has the lowest precedence of all
// requirements: a session, a minimum LSN, a staleness bound or WithPrimary
// in the same context still decides (see WithSession).
func WithEventual(ctx context.Context) context.Context {
	return withRequirement(ctx, func(r *requirement) { r.eventual = true })
}

// WithMaxStaleness returns a context whose reads may use any replica whose
// lag behind the primary, in time, is at most d. A d of zero or less
// removes the bound. It replaces a bound ctx already had. A session,
// minimum LSN or WithPrimary in the same context takes precedence (see
// WithSession).
func WithMaxStaleness(ctx context.Context, d time.Duration) context.Context {
	return withRequirement(ctx, func(r *requirement) { r.maxStaleness = max(d, 0) })
}

// WithFallback returns a context whose reads, when no replica satisfies
// their requirement within the wait budget, do what f says: FallbackPrimary
// reads from the primary; FallbackError ("replica only") never loads the
// primary and returns an error wrapping ErrNoFreshReplica that says why.
func WithFallback(ctx context.Context, f Fallback) context.Context {
	return withRequirement(ctx, func(r *requirement) { r.fallback = &f })
}

// WithReplicated returns a context whose writes (Exec outside a
// transaction, and Commit of a transaction begun with it) return only
// once at least n replicas of the cluster show them flushed to disk
// (their pg_last_wal_receive_lsn, read by the probes the monitor sends
// them; the primary pays the read of the write's position, shared with
// other writes), so that a failover to any of them keeps the write. It waits within the context's deadline (Config's
// ConnectTimeout without one); then it returns an error matching
// ErrNotReplicated, with the write committed on the primary. Writes
// without it do not wait. A write through Query (INSERT … RETURNING)
// waits when its rows close: Row.Scan and Rows.Close return the error.
// It is for database/sql; pgreplicapgx refuses such a context
// (ErrBadConfig) rather than ignore it. Replicas behind a reader endpoint are not
// counted: their probes cannot say which server answered. n <= 0 asks
// for nothing.
func WithReplicated(ctx context.Context, n int) context.Context {
	return withRequirement(ctx, func(r *requirement) { r.replicated = max(n, 0) })
}

// readKind is the requirement that decides a read's route, in increasing
// precedence.
type readKind uint8

const (
	readDefault   readKind = iota // no requirement: Config.Consistency
	readEventual                  // any healthy replica
	readStaleness                 // replica time lag ≤ maxStaleness
	readPosition                  // replica replay LSN ≥ the position
	readPrimary                   // the primary
)

// decide resolves the requirement for a read on the cluster whose system
// identifier is sysid (0 = not known) by the precedence documented on
// WithSession. For readPosition it returns the LSN a replica must have
// replayed: the highest of the session's watermark for the cluster
// (Session.LSNFor), the token positions that apply to it (Token.LSNFor) and
// the minimum LSN. A session applies to every cluster; token positions of
// other clusters do not apply. A nil requirement decides readDefault. The
// error is always nil today (tokens of other clusters used to be
// refused); the router still handles it. decide does not allocate.
func (r *requirement) decide(sysid uint64) (readKind, LSN, error) {
	if r == nil {
		return readDefault, 0, nil
	}
	if r.primary {
		return readPrimary, 0, nil
	}
	need := r.minLSN
	if r.token != nil {
		need = max(need, r.token.LSNFor(sysid))
	}
	if lsn, ok := r.session.lsnFor(sysid); ok {
		return readPosition, max(lsn, need), nil
	}
	switch {
	case need != 0:
		return readPosition, need, nil
	case r.maxStaleness > 0:
		return readStaleness, 0, nil
	case r.eventual:
		return readEventual, 0, nil
	}
	return readDefault, 0, nil
}

// fallbackOr returns the context's fallback policy, or def when the context
// sets none.
func (r *requirement) fallbackOr(def Fallback) Fallback {
	if r == nil || r.fallback == nil {
		return def
	}
	return *r.fallback
}
