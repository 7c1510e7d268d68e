package pgreplica

import (
	"context"
	"sync/atomic"
	"time"
)

// Session gives the reads of one logical session (a user, a browser, a job
// chain) read-your-writes and monotonic reads. It holds the session's
// watermark: the highest WAL position its reads must see. Attach it to a
// context with WithSession; the driver then routes each read that carries
// the context to a replica that has replayed the watermark (or falls back),
// raises the watermark to the commit position after every write, and to the
// replica's known replay position after every replica read, so a later read
// never goes back in time even on another replica.
//
// To carry a session between requests or processes, store Token (or
// TokenCodec.SessionToken) in a cookie, header, job payload or server-side
// store, and fold it back with ParseToken (or TokenCodec.Decode) and Merge,
// or apply it to a single context with WithToken.
//
// A Session belongs to one cluster: the first non-zero system identifier it
// sees (from a write, a replica read or a merged token) binds it. On
// another cluster the session does not apply (that cluster's reads get the
// connector's default) and tokens from another cluster are refused; use one
// Session per cluster when an application talks to several. The Token
// documentation states the rule for failovers inside a cluster.
//
// A Session is safe for concurrent use and never locks. The zero value is
// ready to use; a nil *Session is inert (LSN is 0, Token encodes the zero
// LSN, Merge does nothing).
type Session struct {
	// The three fields are separate atomics. Writers store the system
	// identifier, then the timeline, then the LSN; readers load them in
	// the opposite order, so a reader that sees an LSN also sees a
	// timeline and system identifier at least as recent as the ones that
	// came with it.
	lsn      atomic.Uint64
	timeline atomic.Uint32
	sysid    atomic.Uint64
	// wrote is the highest LSN a write made with this session committed
	// at; reads and merged tokens do not raise it (see WriteLSN).
	wrote atomic.Uint64
}

// WriteLSN returns the highest position a write made with this session
// committed at (0 if none). Unlike LSN, reads and merged tokens do not raise
// it, so comparing it before and after a request tells whether the request
// wrote: an HTTP middleware can then hand the token back after a write on
// any method without setting a cookie on every read.
func (s *Session) WriteLSN() LSN {
	if s == nil {
		return 0
	}
	return LSN(s.wrote.Load())
}

// advanceWrite is advance for a write's commit position.
func (s *Session) advanceWrite(lsn LSN, timeline uint32, sysid uint64) {
	if !s.advance(lsn, timeline, sysid) {
		return
	}
	for {
		cur := s.wrote.Load()
		if uint64(lsn) <= cur || s.wrote.CompareAndSwap(cur, uint64(lsn)) {
			return
		}
	}
}

// NewSession returns an empty session: its watermark is the zero LSN, so its
// first read may use any healthy replica.
func NewSession() *Session {
	return new(Session)
}

// LSN returns the session's watermark: the position every read of the
// session must see.
func (s *Session) LSN() LSN {
	if s == nil {
		return 0
	}
	return LSN(s.lsn.Load())
}

// Token returns the session's watermark as an unsigned token with no expiry
// (see Token for the format). Use TokenCodec.SessionToken for a signed or
// expiring one.
func (s *Session) Token() string {
	return encodeToken(s.Snapshot(), nil)
}

// Merge folds a parsed token into the session: the watermark becomes the
// higher of the two LSNs (a lower LSN never lowers it), and the session
// records the token's timeline and binds to its system identifier if it
// had none. A token whose system identifier differs from the one the
// session is bound to comes from another cluster: Merge leaves the session
// unchanged and returns an error wrapping ErrBadToken, which callers may
// log or ignore.
func (s *Session) Merge(t Token) error {
	return s.merge(t, 0)
}

// merge is Merge for the driver, which knows the system identifier of the
// cluster it serves (0 = not known yet): a token from another cluster is
// rejected with an error wrapping ErrBadToken and the session is unchanged.
func (s *Session) merge(t Token, sysid uint64) error {
	if s == nil {
		return nil
	}
	if t.SystemID != 0 && sysid != 0 && t.SystemID != sysid {
		return errTokenOtherCluster
	}
	if t.SystemID != 0 {
		sysid = t.SystemID
	}
	if !s.advance(t.LSN, t.Timeline, sysid) {
		return errTokenOtherCluster
	}
	return nil
}

// advance max-merges a position into the session: the watermark rises to
// lsn if lsn is higher, the timeline to timeline if higher, and an unbound
// session binds to sysid. It reports false, and changes nothing, when sysid
// is not zero and the session is bound to another cluster. A nil session
// ignores the call and reports false.
func (s *Session) advance(lsn LSN, timeline uint32, sysid uint64) bool {
	if s == nil {
		return false
	}
	if sysid != 0 && !s.sysid.CompareAndSwap(0, sysid) && s.sysid.Load() != sysid {
		return false
	}
	for {
		cur := s.timeline.Load()
		if timeline <= cur || s.timeline.CompareAndSwap(cur, timeline) {
			break
		}
	}
	for {
		cur := s.lsn.Load()
		if uint64(lsn) <= cur || s.lsn.CompareAndSwap(cur, uint64(lsn)) {
			break
		}
	}
	return true
}

// lsnFor returns the watermark that applies to reads on the cluster with
// system identifier sysid (0 = unknown): the session's LSN, or false when
// the session is bound to another cluster (or is nil).
func (s *Session) lsnFor(sysid uint64) (LSN, bool) {
	if s == nil {
		return 0, false
	}
	lsn := LSN(s.lsn.Load())
	if own := s.sysid.Load(); own != 0 && sysid != 0 && own != sysid {
		return 0, false
	}
	return lsn, true
}

// Snapshot returns the session's state as a Token without expiry (what
// Token encodes). A nil session gives the zero Token.
func (s *Session) Snapshot() Token {
	if s == nil {
		return Token{}
	}
	lsn := LSN(s.lsn.Load())
	tl := s.timeline.Load()
	return Token{LSN: lsn, Timeline: tl, SystemID: s.sysid.Load()}
}

// requirementKey is the one context key under which every With* function
// stores the current *requirement.
type requirementKey struct{}

// requirement is everything a context asks of a read. A stored requirement
// is never modified: every With* function copies the current one, changes
// the copy and stores it, so the driver needs one ctx.Value lookup per
// statement and a derived context never affects its parent.
type requirement struct {
	session      *Session      // WithSession: read-your-writes + monotonic reads; the driver advances it
	minLSN       LSN           // WithMinLSN / WithToken: replica must have replayed ≥ this
	minSysID     uint64        // WithToken: cluster minLSN belongs to (0 = unknown)
	sysIDClash   bool          // WithToken: tokens of two different clusters were combined
	primary      bool          // WithPrimary: must be current
	eventual     bool          // WithEventual: any healthy replica, ignore the process default
	maxStaleness time.Duration // WithMaxStaleness: replica time lag ≤ d (0 = unset)
	fallback     Fallback      // WithFallback; FallbackDefault = connector's setting
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
//  2. A position: the read needs a replica that replayed the higher of the
//     session's watermark (WithSession) and the minimum LSN (WithMinLSN,
//     WithToken). A session with a zero watermark still makes this the
//     deciding requirement (any healthy replica, then monotonic).
//  3. WithMaxStaleness: any replica whose time lag is at most d.
//  4. WithEventual: any healthy replica.
//  5. None of these: the connector's default (Config.DefaultConsistency).
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
// from outside (a cookie, a header, a job payload). It max-merges with a
// minimum ctx already had, so it never lowers one; the zero LSN adds no
// requirement. See WithSession for how requirements combine.
func WithMinLSN(ctx context.Context, lsn LSN) context.Context {
	return withRequirement(ctx, func(r *requirement) { r.minLSN = max(r.minLSN, lsn) })
}

// WithToken returns a context whose reads must see the token's LSN, as
// WithMinLSN does. The driver rejects such a read with an error wrapping
// ErrBadToken when the token's system identifier names another cluster
// (see Token), so that a token is never compared with unrelated positions.
// The token itself is assumed valid: parse it with ParseToken or
// TokenCodec.Decode first.
func WithToken(ctx context.Context, t Token) context.Context {
	return withRequirement(ctx, func(r *requirement) {
		r.minLSN = max(r.minLSN, t.LSN)
		switch {
		case t.SystemID == 0:
		case r.minSysID == 0:
			r.minSysID = t.SystemID
		case r.minSysID != t.SystemID:
			r.sysIDClash = true
		}
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
// FallbackDefault restores the connector's Config.Fallback.
func WithFallback(ctx context.Context, f Fallback) context.Context {
	return withRequirement(ctx, func(r *requirement) { r.fallback = f })
}

// readKind is the requirement that decides a read's route, in increasing
// precedence.
type readKind uint8

const (
	readDefault   readKind = iota // no requirement: Config.DefaultConsistency
	readEventual                  // any healthy replica
	readStaleness                 // replica time lag ≤ maxStaleness
	readPosition                  // replica replay LSN ≥ the position
	readPrimary                   // the primary
)

// decide resolves the requirement for a read on the cluster whose system
// identifier is sysid (0 = not known) by the precedence documented on
// WithSession. For readPosition it returns the LSN a replica must have
// replayed. A session bound to another cluster does not apply. A token
// (WithToken) from another cluster, or tokens from two different
// clusters, give an error wrapping ErrBadToken. A nil requirement decides
// readDefault.
func (r *requirement) decide(sysid uint64) (readKind, LSN, error) {
	if r == nil {
		return readDefault, 0, nil
	}
	if r.primary {
		return readPrimary, 0, nil
	}
	if r.sysIDClash || r.minSysID != 0 && sysid != 0 && r.minSysID != sysid {
		return 0, 0, errTokenOtherCluster
	}
	if lsn, ok := r.session.lsnFor(sysid); ok {
		return readPosition, max(lsn, r.minLSN), nil
	}
	switch {
	case r.minLSN != 0:
		return readPosition, r.minLSN, nil
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
	if r == nil || r.fallback == FallbackDefault {
		return def
	}
	return r.fallback
}
