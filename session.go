package pgreplica

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/pgreplica/pgreplica/internal/monoclock"
	"github.com/pgreplica/pgreplica/internal/tokenwire"
)

// Session gives the reads of one logical session (a user, a browser, a job
// chain) read-your-writes and monotonic reads. It holds the session's
// watermarks, one per cluster: the highest WAL position its reads on that
// cluster must see. Attach it to a context with WithSession; the driver
// then routes each read that carries the context to a replica that has
// replayed the watermark of the read's cluster (or falls back), raises that
// watermark to the commit position after every write, and to the replica's
// known replay position after every replica read, so a later read never
// goes back in time even on another replica.
//
// To carry a session between requests or processes, store Token (or
// TokenCodec.SessionToken) in a cookie, header, job payload or server-side
// store, and fold it back with ParseToken (or TokenCodec.Decode) and Merge,
// or apply it to a single context with WithToken. The token carries every
// cluster's watermark.
//
// # Clusters
//
// One Session serves every cluster an application talks to (a main
// database and a second one, or shards): positions are kept per cluster,
// keyed by system identifier (pg_control_system()), because LSNs of two
// clusters are unrelated. A position taken before the driver knew its
// cluster's system identifier (right after start) is kept apart, as
// "cluster not known", and applies to reads on every cluster: nothing says
// which cluster it came from, so applying it everywhere is the only choice
// that never loses a write. It costs little, since the driver learns the
// system identifier with its first probe of the primary.
//
// A Session tracks at most MaxClusters clusters, in the order it meets
// them, and never forgets one. Past the bound it still must not lose a
// write, so:
//
//   - a write, or a merged token, on a cluster it cannot track marks the
//     session overflowed. From then on a read on any cluster the session
//     does not track must see the highest LSN, which no primary has
//     written: it needs the primary's position at the read, read then
//     (see Token, "Positions no primary has written"). Tracked clusters
//     keep their exact watermarks, so only the clusters past the bound
//     pay, and the token carries the overflow to the next process;
//   - the position of a replica read on a cluster it cannot track is
//     dropped. It serves only monotonic reads, and overflowing for it would
//     send every read of a request that fans out over many shards to their
//     primaries.
//
// A Session is safe for concurrent use and never locks; a read's lookup
// (LSNFor, and the driver's own on every read) scans at most MaxClusters
// atomics and does not allocate. The zero value is ready to use; a nil
// *Session is inert (LSN is 0, Token encodes the zero LSN, Merge does
// nothing).
type Session struct {
	// unknown holds the positions whose cluster was not known.
	unknown sessionPos
	// slots hold the tracked clusters. A slot is claimed once, by a
	// compare-and-swap of its system identifier from 0, and never
	// released; slots are claimed in order, so the first free slot ends
	// the tracked ones and a cluster is never in two slots.
	slots [MaxClusters]sessionSlot
	// overflow is set when a write or a token could not be tracked.
	overflow atomic.Bool
	// writes counts the writes recorded (see WriteCount).
	writes atomic.Uint64
}

// sessionSlot is a tracked cluster.
type sessionSlot struct {
	sysid atomic.Uint64 // 0: free
	sessionPos
}

// sessionPos is one watermark. Writers raise the timeline before the LSN
// and readers load the LSN before the timeline, so a reader that sees an
// LSN also sees a timeline at least as recent as the one that came with it.
type sessionPos struct {
	lsn      atomic.Uint64
	timeline atomic.Uint32
	// wrote is the highest LSN a write committed at; reads and merged
	// tokens do not raise it.
	wrote atomic.Uint64
	// pending is the ticket of the latest operation whose position is not
	// read yet (a write, or a read on the primary), pendingWrite the one
	// of the latest such write; marks are the cluster marks whose captures
	// cover them (see internal/marks). 0: none.
	pending, pendingWrite atomic.Uint64
	pendingWriteAt        atomic.Int64 // unix ns
	marks                 atomic.Pointer[clusterMarks]
	// via is the marks of the connector of the session's last operation
	// on the cluster: their capturer reads pending positions for Token
	// and Snapshot.
	via atomic.Pointer[handleMarks]
	// lastNode is the replica of the session's last replica read on this
	// cluster, which ran from lastStart to lastEnd (on the router's clock,
	// internal/monoclock): until a position read after it is folded into
	// the watermark, a read elsewhere must first be bounded by one (see
	// plan.affinity).
	lastNode           atomic.Pointer[node]
	lastServer         atomic.Pointer[server]
	lastStart, lastEnd atomic.Int64
	// replicaReads counts the session's replica reads on the cluster, the
	// last of which ran on shownBy; primaryShown is the count at the last
	// of its primary reads that checked the primary showed what they saw
	// (visibility.go).
	replicaReads, primaryShown atomic.Uint64
	shownBy                    atomic.Pointer[node]
}

// settle folds the position of covered tickets into the watermark (the
// capture's, at or past the operation's own) and returns the ticket still
// pending, 0 if none. It never blocks.
func (p *sessionPos) settle() uint64 {
	t := p.pending.Load()
	if t == 0 {
		return 0
	}
	m := p.marks.Load()
	if m == nil || m.Covered() < t {
		return t
	}
	lsn := LSN(m.All())
	p.raise(lsn, 0)
	if w := p.pendingWrite.Load(); w != 0 && w <= t {
		p.raiseWrote(lsn)
		p.pendingWrite.CompareAndSwap(w, 0)
	}
	if p.pending.CompareAndSwap(t, 0) {
		return 0
	}
	return p.settle() // a newer ticket arrived meanwhile
}

// resolvePending reads the positions still pending, for Token, Snapshot
// and the accessors, which must carry them: those of writes and primary
// reads, and the bound on the last replica read (a position of the
// primary read after it). One statement on the primary, shared with other
// callers. A position that cannot be read (the primary is unreachable) is
// replaced by one no replica reaches: the next reads go to the primary
// rather than miss a write or go back in time.
func (p *sessionPos) resolvePending() {
	t := p.settle()
	last := p.lastNode.Load()
	if t == 0 && last == nil {
		return
	}
	m, h := p.marks.Load(), p.via.Load()
	if m == nil || h == nil {
		p.raise(unreachableLSN, 0)
		return
	}
	if last != nil {
		t = max(t, m.Issue(false, false, false)) // issued after the read ended
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.captureTimeout)
	defer cancel()
	if err := m.Resolve(ctx, h.capturer, t); err != nil {
		p.raise(unreachableLSN, 0)
		return
	}
	if last != nil {
		p.raise(LSN(m.All()), 0)
		p.lastNode.CompareAndSwap(last, nil)
	}
	p.settle()
}

// noteReplicaRead records a read of the session on replica n of cluster
// sysid, from start to end. Successive reads of a session record in
// order; concurrent reads of one session are not ordered anyway.
func (s *Session) noteReplicaRead(sysid uint64, c *handleMarks, m *clusterMarks, n *node, srv *server, start, end monoclock.Time) {
	if s == nil || sysid == 0 {
		return
	}
	p := s.pos(sysid, true)
	if p == nil {
		return // past the bound: serves monotonic reads only (see Session)
	}
	// The same as last time, as a rule: a load spares a locked store.
	if p.marks.Load() != m {
		p.marks.Store(m)
	}
	if p.via.Load() != c {
		p.via.Store(c)
	}
	p.lastStart.Store(int64(start))
	p.lastEnd.Store(int64(end))
	if p.lastServer.Load() != srv {
		p.lastServer.Store(srv)
	}
	if p.lastNode.Load() != n {
		p.lastNode.Store(n)
	}
	if p.shownBy.Load() != n {
		p.shownBy.Store(n)
	}
	p.replicaReads.Add(1)
}

// primaryMayHide reports whether a replica read of the session on cluster
// sysid may have shown a commit that the primary does not show yet: one
// since its last primary read that checked (visibility.go). n is the
// replica of the latest and srv the server it ran on (nil when not
// known), gen names it, for primaryShows.
func (s *Session) primaryMayHide(sysid uint64) (n *node, srv *server, gen uint64, ok bool) {
	if s == nil || sysid == 0 {
		return nil, nil, 0, false
	}
	p := s.pos(sysid, false)
	if p == nil {
		return nil, nil, 0, false
	}
	gen = p.replicaReads.Load()
	if gen <= p.primaryShown.Load() {
		return nil, nil, 0, false
	}
	return p.shownBy.Load(), p.lastServer.Load(), gen, true
}

// primaryShows records that the primary showed everything the session's
// replica reads up to gen could have seen.
func (s *Session) primaryShows(sysid, gen uint64) {
	if p := s.pos(sysid, false); p != nil {
		atomicMax(&p.primaryShown, gen)
	}
}

// lastRead returns the session's last replica read on cluster sysid:
// its replica, the server it ran on (nil: not known, behind a pooler) and
// when it ran (n nil when none is outstanding).
func (s *Session) lastRead(sysid uint64) (n *node, srv *server, start, end monoclock.Time) {
	if s == nil || sysid == 0 {
		return nil, nil, 0, 0
	}
	p := s.pos(sysid, false)
	if p == nil {
		return nil, nil, 0, 0
	}
	n = p.lastNode.Load()
	if n == nil {
		return nil, nil, 0, 0
	}
	return n, p.lastServer.Load(), monoclock.Time(p.lastStart.Load()), monoclock.Time(p.lastEnd.Load())
}

// notePending records an operation on cluster sysid whose position will
// be read later under ticket, by a capture of m: a write (which must not
// be lost: past the bound it overflows the session, and it counts in
// WriteCount) or a read on the primary (which serves monotonic reads only
// and is dropped past the bound).
func (s *Session) notePending(sysid uint64, timeline uint32, c *handleMarks, m *clusterMarks, ticket uint64, write bool) {
	if s == nil {
		return
	}
	p := s.pos(sysid, true)
	switch {
	case p != nil:
		p.raise(0, timeline)
		p.marks.Store(m)
		p.via.Store(c)
		atomicMax(&p.pending, ticket)
		if write {
			p.pendingWriteAt.Store(time.Now().UnixNano())
			atomicMax(&p.pendingWrite, ticket)
		}
	case write:
		s.overflow.Store(true)
	}
	if write {
		s.writes.Add(1) // counted after the position is in place
	}
}

// pendingFor returns the ticket a read on cluster sysid must have
// resolved (see plan.pending), 0 if none, and when the latest pending
// write committed (zero when only the bound of a read on the primary is
// pending).
func (s *Session) pendingFor(sysid uint64) (ticket uint64, writeAt time.Time) {
	if s == nil || sysid == 0 {
		return 0, time.Time{}
	}
	if p := s.pos(sysid, false); p != nil {
		if t := p.settle(); t != 0 {
			if p.pendingWrite.Load() != 0 {
				writeAt = time.Unix(0, p.pendingWriteAt.Load())
			}
			return t, writeAt
		}
	}
	return 0, time.Time{}
}

// raise max-merges a position into p.
func (p *sessionPos) raise(lsn LSN, timeline uint32) {
	for {
		cur := p.timeline.Load()
		if timeline <= cur || p.timeline.CompareAndSwap(cur, timeline) {
			break
		}
	}
	atomicMax(&p.lsn, uint64(lsn))
}

// raiseWrote max-merges a write's commit position into p.wrote.
func (p *sessionPos) raiseWrote(lsn LSN) { atomicMax(&p.wrote, uint64(lsn)) }

// NewSession returns an empty session: its watermarks are the zero LSN, so
// its first read may use any healthy replica.
func NewSession() *Session {
	return new(Session)
}

// pos returns the watermark of cluster sysid (0: the one of unknown
// clusters), claiming a free slot for a new cluster when claim is set. It
// returns nil for a cluster the session does not track (past the bound,
// or not yet met when claim is false).
func (s *Session) pos(sysid uint64, claim bool) *sessionPos {
	if sysid == 0 {
		return &s.unknown
	}
	for i := range s.slots {
		sl := &s.slots[i]
		cur := sl.sysid.Load()
		if cur == 0 {
			if !claim {
				return nil // slots are claimed in order: no later one is
			}
			if sl.sysid.CompareAndSwap(0, sysid) {
				return &sl.sessionPos
			}
			cur = sl.sysid.Load() // another goroutine claimed it
		}
		if cur == sysid {
			return &sl.sessionPos
		}
	}
	return nil
}

// record max-merges a position that must not be lost (a write's, a
// token's); past the bound it marks the session overflowed. It returns the
// watermark raised, or nil.
func (s *Session) record(lsn LSN, timeline uint32, sysid uint64) *sessionPos {
	p := s.pos(sysid, true)
	if p == nil {
		s.overflow.Store(true)
		return nil
	}
	p.raise(lsn, timeline)
	return p
}

// advance max-merges the position of a read into the watermark of cluster
// sysid (0 = not known yet, see Session). It reports false, and changes
// nothing, when the session is nil or is full and does not track sysid: a
// read's position serves only monotonic reads and is dropped past the
// bound (see Session).
func (s *Session) advance(lsn LSN, timeline uint32, sysid uint64) bool {
	if s == nil {
		return false
	}
	p := s.pos(sysid, true)
	if p == nil {
		return false
	}
	p.raise(lsn, timeline)
	return true
}

// settleUnreachable replaces the unreachable position the session kept
// for cluster sysid (a write's position that could not be read while its
// primary was gone, resolvePending) with lsn, what the cluster's primary
// has written now: every write of the session that survived is at or
// below it. Any other position of the session is left as it is.
func (s *Session) settleUnreachable(sysid uint64, lsn LSN) {
	if s == nil {
		return
	}
	if p := s.pos(sysid, false); p != nil {
		p.lsn.CompareAndSwap(uint64(unreachableLSN), uint64(lsn))
	}
}

// advanceWrite records a write's commit position on cluster sysid: it
// raises the cluster's watermark and write position, or marks the session
// overflowed past the bound, and counts the write (WriteCount).
func (s *Session) advanceWrite(lsn LSN, timeline uint32, sysid uint64) {
	if s == nil {
		return
	}
	if p := s.record(lsn, timeline, sysid); p != nil {
		p.raiseWrote(lsn)
	}
	// Counted after the position is in place, so that whoever sees the
	// count also sees the position.
	s.writes.Add(1)
}

// lsnFor returns the watermark that applies to reads on the cluster with
// system identifier sysid (0 = not known), as LSNFor does. The bool is
// false only for a nil session: a session applies to every cluster. It
// does not allocate.
func (s *Session) lsnFor(sysid uint64) (LSN, bool) {
	if s == nil {
		return 0, false
	}
	need := LSN(s.unknown.lsn.Load())
	if sysid == 0 {
		if s.overflow.Load() {
			return unreachableLSN, true
		}
		for i := range s.slots {
			sl := &s.slots[i]
			if sl.sysid.Load() == 0 {
				break
			}
			need = max(need, LSN(sl.lsn.Load()))
		}
		return need, true
	}
	p := s.pos(sysid, false)
	if p == nil {
		if s.overflow.Load() {
			return unreachableLSN, true
		}
		return need, true
	}
	p.settle()
	return max(need, LSN(p.lsn.Load())), true
}

// LSNFor returns the watermark a read on the cluster with system
// identifier sysid must see: the higher of the cluster's own and the one
// of positions whose cluster was not known. For a cluster the session has
// not met it is the latter, or the highest LSN once the session
// overflowed (see Session). For sysid 0, a read whose cluster is not
// known, it is the highest watermark of all. A nil session gives 0.
//
// A write's position is read after the write, shared with other writes
// (see docs/consistency.md); if it has not been read yet, LSNFor reads it
// first (a statement on the primary), as LSN, WriteLSN, Snapshot and
// Token do.
func (s *Session) LSNFor(sysid uint64) LSN {
	s.resolvePending(sysid)
	lsn, _ := s.lsnFor(sysid)
	return lsn
}

// resolvePending reads the pending positions of cluster sysid, or of
// every tracked cluster for sysid 0 (see sessionPos.resolvePending).
func (s *Session) resolvePending(sysid uint64) {
	if s == nil {
		return
	}
	if sysid != 0 {
		if p := s.pos(sysid, false); p != nil {
			p.resolvePending()
		}
		return
	}
	for i := range s.slots {
		if s.slots[i].sysid.Load() == 0 {
			return
		}
		s.slots[i].resolvePending()
	}
}

// first returns the first cluster's watermark, or nil when the session has
// met no cluster.
func (s *Session) first() *sessionPos {
	if s.slots[0].sysid.Load() == 0 {
		return nil
	}
	return &s.slots[0].sessionPos
}

// LSN returns the watermark of the session's first cluster (the first the
// session met, through a write, a read or a merged token), raised to the
// positions whose cluster was not known: for an application with one
// cluster, the position every read of the session must see. Use LSNFor
// for another cluster, and Snapshot for all of them.
func (s *Session) LSN() LSN {
	if s == nil {
		return 0
	}
	lsn := LSN(s.unknown.lsn.Load())
	if p := s.first(); p != nil {
		p.resolvePending()
		lsn = max(lsn, LSN(p.lsn.Load()))
	}
	return lsn
}

// WriteLSN returns the highest position a write made with this session
// committed at on its first cluster (as LSN), or on a cluster not known
// yet; 0 if none. Unlike LSN, reads and merged tokens do not raise it. To
// tell whether some work wrote on any cluster, compare WriteCount.
func (s *Session) WriteLSN() LSN {
	if s == nil {
		return 0
	}
	lsn := LSN(s.unknown.wrote.Load())
	if p := s.first(); p != nil {
		p.resolvePending()
		lsn = max(lsn, LSN(p.wrote.Load()))
	}
	return lsn
}

// WriteCount returns how many writes the driver recorded in the session, on
// any cluster. Reads and merged tokens do not change it, so comparing it
// before and after a request tells whether the request wrote: an HTTP
// middleware can then hand the token back after a write on any method
// without setting a cookie on every read.
func (s *Session) WriteCount() uint64 {
	if s == nil {
		return 0
	}
	return s.writes.Load()
}

// Token returns the session's watermarks as an unsigned token with no
// expiry (see Token for the format). Use TokenCodec.SessionToken for a
// signed or expiring one.
func (s *Session) Token() string {
	return encodeToken(s.Snapshot(), nil)
}

// Snapshot returns the session's state as a Token without expiry (what
// Token encodes): the tracked clusters in the order the session met them
// (the first in the Token's LSN, Timeline and SystemID), then, when it is
// not zero, the watermark of positions whose cluster was not known (with
// SystemID 0), and Overflow. A session that met no cluster gives a token
// of the latter alone; a nil session gives the zero Token.
func (s *Session) Snapshot() Token {
	if s == nil {
		return Token{}
	}
	var set tokenwire.Fields
	for i := range s.slots {
		sl := &s.slots[i]
		sysid := sl.sysid.Load()
		if sysid == 0 {
			break
		}
		sl.resolvePending()
		set.Add(tokenwire.Position{SystemID: sysid, Timeline: sl.timeline.Load(), LSN: sl.lsn.Load()})
	}
	lsn := s.unknown.lsn.Load()
	if tl := s.unknown.timeline.Load(); lsn != 0 || set.N == 0 {
		set.Add(tokenwire.Position{Timeline: tl, LSN: lsn})
	}
	set.Overflow = s.overflow.Load()
	return tokenOf(&set)
}

// Merge folds a parsed token into the session: each of the token's
// positions raises the watermark of its own cluster (a lower LSN never
// lowers one), a position with SystemID 0 the watermark of positions
// whose cluster was not known, and the token's Overflow carries over.
// Clusters past the bound mark the session overflowed (see Session). The
// error is always nil; Merge used to refuse tokens of another cluster and
// keeps its signature for callers that check it.
func (s *Session) Merge(t Token) error {
	return s.merge(t, 0)
}

// merge is Merge for the driver, which knows the system identifier of the
// cluster it serves (0 = not known yet). Every position is merged for its
// own cluster whatever sysid is; the position for sysid goes first, so
// that a token that overflows the session leaves the served cluster
// tracked.
func (s *Session) merge(t Token, sysid uint64) error {
	if s == nil {
		return nil
	}
	n := 1 + len(t.Others)
	if sysid != 0 {
		for i := range n {
			if p := t.at(i); p.SystemID == sysid {
				s.record(p.LSN, p.Timeline, p.SystemID)
			}
		}
	}
	for i := range n {
		p := t.at(i)
		s.record(p.LSN, p.Timeline, p.SystemID)
	}
	if t.Overflow {
		s.overflow.Store(true)
	}
	return nil
}

// SessionToken returns the text form of the session's current watermark,
// encoded (signed, with an expiry) as Encode does. A nil session gives the
// token of the zero LSN.
func (c TokenCodec) SessionToken(s *Session) string {
	return c.Encode(s.Snapshot())
}
