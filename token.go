package pgreplica

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/pgreplica/pgreplica/internal/tokenwire"
)

// Tokens: the positions a Session carries from one process to another
// (Position, Token) and their signed text form (TokenCodec, ParseToken).

// MaxClusters bounds the clusters a Session tracks and a Token carries, one
// position each (plus one position whose cluster is not known). Eight is far
// more than the databases an application usually talks to with one session
// (a main database, a second one, a few shards), and it keeps the longest
// token, signed and expiring, at 298 characters: well within a cookie or a
// header. What happens past the bound is described on Session.
const MaxClusters = 8

// Position is what a read on one cluster must see: the cluster's WAL
// position LSN.
type Position struct {
	// SystemID identifies the cluster (pg_control_system()'s
	// system_identifier). 0 means the cluster was not known when the
	// position was taken; such a position applies to every cluster,
	// because nothing says which one it came from.
	SystemID uint64
	// Timeline is the highest timeline of the cluster's primary the
	// position's session saw, for diagnostics; 0 means unknown.
	Timeline uint32
	// LSN is the position a read on the cluster must see.
	LSN LSN
}

// Token is a read requirement that travels between processes: in a cookie,
// an HTTP header, a queue message or a server-side store. It holds one
// position per cluster and says "a read on cluster X must see X's WAL up to
// X's position" (see LSNFor). (*Session).Token and TokenCodec.SessionToken
// produce one; ParseToken and TokenCodec.Decode read one back;
// (*Session).Merge and WithToken apply it; Merge combines two.
//
// A token of a single cluster is LSN, Timeline and SystemID, as it always
// was; a token of several clusters holds the first in those fields and the
// others in Others. Positions lists them all. A Token holds a slice, so it
// is not comparable with ==; use Equal.
//
// # Text form
//
// A token is base64url without padding (RFC 4648 §5: letters, digits, '-'
// and '_'), so it needs no escaping in a URL, a cookie or a header. Input
// longer than 298 characters is rejected before any decoding. The decoded
// bytes, all integers big-endian, are in one of two versions.
//
// Version 1, a single position and no overflow, at most 83 characters
// (what every token of a single cluster still is, so readers that know
// only version 1 keep reading them):
//
//	offset size field
//	     0    1 version, 1
//	     1    1 flags: 0x01 signed, 0x02 has expiry; other bits must be 0
//	     2    8 LSN
//	    10    4 Timeline (0 = unknown)
//	    14    8 SystemID (0 = unknown)
//	    22    8 Expires, Unix seconds, 1 to 253402300799 (only with flag 0x02)
//	22|30    32 HMAC-SHA256 (only with flag 0x01)
//
// Version 2, several positions or an overflow, at most 298 characters:
//
//	offset size field
//	     0    1 version, 2
//	     1    1 flags: 0x01 signed, 0x02 has expiry, 0x04 Overflow; other
//	            bits must be 0
//	     2    1 n, the number of positions: 2 to MaxClusters+1, or 1 with
//	            flag 0x04 (anything else is version 1's)
//	     3  20n positions, each LSN (8), Timeline (4), SystemID (8) as in
//	            version 1; the first is the Token's LSN, Timeline and
//	            SystemID, the rest are Others in order; no two with the
//	            same SystemID, at most MaxClusters with a SystemID other
//	            than 0
//	 3+20n    8 Expires, as in version 1 (only with flag 0x02)
//	  ...    32 HMAC-SHA256 (only with flag 0x01)
//
// The HMAC is computed with TokenCodec.Key over the 16 bytes
// "pgreplica-token\x00" followed by every byte before the HMAC, and is
// verified in constant time. Every encoding is canonical: a string that
// parses re-encodes to itself.
//
// # Clusters and failovers
//
// SystemID identifies the cluster: LSNs of two different clusters are
// unrelated, so a position applies only to reads on its own cluster, and a
// position whose SystemID is 0 (taken before the cluster was known)
// applies to reads on every cluster. A read whose own cluster is not known
// must see every position of the token. See LSNFor.
//
// The LSN of a position is honoured across timelines. A promoted standby
// starts its new timeline at the position where it stopped replaying and
// continues the same LSN sequence, so "replayed at least LSN" keeps its
// meaning after a promotion: a server on the new timeline that reached the
// position holds every write of the token's session that survived the
// failover. A position from an older timeline is therefore never rejected
// for its timeline. Timeline records the highest timeline the producing
// session saw, for diagnostics.
//
// # Positions no primary has written
//
// A position ahead of everything the cluster's primary has written names
// no write: the token was forged, or its write was lost in a failover. No
// replica can reach it, so a read never waits for it, nor falls back to
// the primary over it: when no replica is known to have a read's position
// and the position is ahead of every one the process knows of the
// primary, the driver reads the primary's current position (one
// statement, shared between concurrent reads; a write another process
// made a moment ago is ahead too) and, when the read's position is still
// ahead of it, lowers it to it. Every write the read must see committed
// before the read began, so it is at or below that position: the read
// then needs what a read of the primary's newest write needs, whatever the
// token claimed. The same holds for Overflow and for the highest LSN a
// session records when it cannot read a write's position. The helpers
// that read tokens from outside also refuse such a token as ErrBadToken
// (see CheckToken).
type Token struct {
	// LSN is the WAL position a read on the first cluster must see.
	LSN LSN
	// Timeline is the highest timeline of the first cluster's primary the
	// token's session saw; 0 means unknown.
	Timeline uint32
	// SystemID is the first cluster's system identifier; 0 means unknown
	// (the position applies to every cluster).
	SystemID uint64
	// Others holds the positions of the token's other clusters, in the
	// order its session met them; nil for a token of one cluster. A
	// position's SystemID appears once in a token, and at most MaxClusters
	// positions have a SystemID other than 0: Encode and Merge keep that
	// true (Encode merges repeated clusters and drops those past the
	// bound, setting Overflow), and Decode rejects input that breaks it.
	Others []Position
	// Overflow says the token's session met more clusters than it could
	// track (see Session): a read on a cluster the token has no position
	// for must see the highest LSN, which no primary has written, so it
	// needs the primary's position at the read (see "Positions no primary
	// has written" above).
	Overflow bool
	// Expires, when not zero, is when the token stops being accepted. It is
	// carried with one-second precision (rounded down).
	Expires time.Time
}

// unreachableLSN is the highest LSN: no server reaches it, so a read that
// must see it needs the primary's position at the read (lowerUnwritten).
const unreachableLSN = ^LSN(0)

// unprovableLSN is what a read needs when the position it must see could
// not be read (no primary answered in time): no replica can be proven to
// have it. It is a requirement of that one read, never kept in a session
// or a token (a session that kept it would send every later read to the
// primary).
const unprovableLSN = ^LSN(0) >> 1

// first returns the position in t's LSN, Timeline and SystemID fields.
func (t Token) first() Position {
	return Position{SystemID: t.SystemID, Timeline: t.Timeline, LSN: t.LSN}
}

// Positions returns every position of t, the first (LSN, Timeline,
// SystemID) followed by Others, in a new slice.
func (t Token) Positions() []Position {
	return append([]Position{t.first()}, t.Others...)
}

// LSNFor returns the position a read on the cluster with system identifier
// sysid must see: the higher of t's position for that cluster and its
// position with SystemID 0. Positions of other clusters do not apply; when
// t has no position for the cluster and Overflow is set, the result is the
// highest LSN (no replica qualifies). For sysid 0, a read whose cluster is
// not known, it is the highest of all of t's positions (the highest LSN
// with Overflow). It does not allocate.
func (t Token) LSNFor(sysid uint64) LSN {
	if sysid == 0 && t.Overflow {
		return unreachableLSN
	}
	need, found := LSN(0), false
	for i := range 1 + len(t.Others) {
		p := t.at(i)
		switch {
		case p.SystemID == 0 || sysid == 0:
			need = max(need, p.LSN)
		case p.SystemID == sysid:
			need, found = max(need, p.LSN), true
		}
	}
	if !found && t.Overflow {
		return unreachableLSN
	}
	return need
}

// at returns t's i-th position: 0 is the first, i ≥ 1 is Others[i-1].
func (t Token) at(i int) Position {
	if i == 0 {
		return t.first()
	}
	return t.Others[i-1]
}

// Merge returns the token that requires what t and u both require, and
// whether it requires more than t (or expires later): for each cluster the
// position with the higher LSN (on equal LSNs t's), clusters in the order
// t, then u, met them. Positions with a zero LSN require nothing and are
// left out. Clusters past MaxClusters are left out with Overflow set, which
// still protects their reads (see Token.Overflow); Overflow of either
// token carries over. Expires becomes the later of the two, a zero Expires
// counting as never; a token without any position does not take part.
//
// Merge is how the TokenStores of pgreplicahttp and redisstore combine
// tokens. It never modifies t or u and never shares their Others.
func (t Token) Merge(u Token) (Token, bool) {
	var set tokenwire.Fields
	set.Overflow = t.Overflow
	addRequired(&set, t)
	tEmpty := set.N == 0 && !set.Overflow
	changed := addRequired(&set, u)
	if u.Overflow && !set.Overflow {
		set.Overflow, changed = true, true
	}
	uEmpty := !u.Overflow && u.LSNFor(0) == 0
	set.Expires = t.Expires
	switch {
	case uEmpty:
	case tEmpty:
		set.Expires = u.Expires
	case set.Expires.IsZero() || u.Expires.IsZero():
		set.Expires = time.Time{}
	case u.Expires.After(set.Expires):
		set.Expires = u.Expires
	}
	changed = changed || !set.Expires.Equal(t.Expires)
	return tokenOf(&set), changed
}

// Equal reports whether t and u hold the same positions in the same order,
// the same Overflow and the same Expires (compared with time.Time.Equal).
func (t Token) Equal(u Token) bool {
	return t.first() == u.first() && slices.Equal(t.Others, u.Others) &&
		t.Overflow == u.Overflow && t.Expires.Equal(u.Expires)
}

// wirePos and posOf convert a Position to and from the wire's.
func wirePos(p Position) tokenwire.Position {
	return tokenwire.Position{LSN: uint64(p.LSN), Timeline: p.Timeline, SystemID: p.SystemID}
}

func posOf(p tokenwire.Position) Position {
	return Position{SystemID: p.SystemID, Timeline: p.Timeline, LSN: LSN(p.LSN)}
}

// addRequired adds to set t's positions that require something (a
// non-zero LSN), one per cluster within the bound (tokenwire's
// Fields.Add), and reports whether the set changed.
func addRequired(set *tokenwire.Fields, t Token) bool {
	changed := false
	if t.LSN != 0 {
		changed = set.Add(wirePos(t.first()))
	}
	for _, p := range t.Others {
		if p.LSN != 0 && set.Add(wirePos(p)) {
			changed = true
		}
	}
	return changed
}

// tokenOf returns the positions of f as a Token, its Others a new slice.
func tokenOf(f *tokenwire.Fields) Token {
	t := Token{Overflow: f.Overflow, Expires: f.Expires}
	if f.N > 0 {
		t.LSN, t.Timeline, t.SystemID = LSN(f.Pos[0].LSN), f.Pos[0].Timeline, f.Pos[0].SystemID
	}
	if f.N > 1 {
		t.Others = make([]Position, f.N-1)
		for i, p := range f.Pos[1:f.N] {
			t.Others[i] = posOf(p)
		}
	}
	return t
}

// tokenwire's bound is MaxClusters: this fails to compile if they differ.
const _ = uint(MaxClusters-tokenwire.MaxClusters) + uint(tokenwire.MaxClusters-MaxClusters)

// Token errors. Each wraps ErrBadToken with tokenwire's short reason and
// never quotes the input, which may be attacker-controlled.
var (
	errTokenEmpty     = badToken(tokenwire.ErrEmpty)
	errTokenOversized = badToken(tokenwire.ErrOversized)
	errTokenGarbled   = badToken(tokenwire.ErrGarbled)
	errTokenTruncated = badToken(tokenwire.ErrTruncated)
	errTokenVersion   = badToken(tokenwire.ErrVersion)
	errTokenNeedsKey  = badToken(tokenwire.ErrNeedsKey)
	errTokenUnsigned  = badToken(tokenwire.ErrUnsigned)
	errTokenSignature = badToken(tokenwire.ErrSignature)
	errTokenExpired   = badToken(tokenwire.ErrExpired)
	errTokenClusters  = badToken(tokenwire.ErrClusters)
	errTokenDuplicate = badToken(tokenwire.ErrDuplicate)
)

// tokenErrors gives the error above for each of tokenwire's reasons, so
// that a failed decode does not allocate one.
var tokenErrors = map[error]error{
	tokenwire.ErrEmpty:     errTokenEmpty,
	tokenwire.ErrOversized: errTokenOversized,
	tokenwire.ErrGarbled:   errTokenGarbled,
	tokenwire.ErrTruncated: errTokenTruncated,
	tokenwire.ErrVersion:   errTokenVersion,
	tokenwire.ErrNeedsKey:  errTokenNeedsKey,
	tokenwire.ErrUnsigned:  errTokenUnsigned,
	tokenwire.ErrSignature: errTokenSignature,
	tokenwire.ErrExpired:   errTokenExpired,
	tokenwire.ErrClusters:  errTokenClusters,
	tokenwire.ErrDuplicate: errTokenDuplicate,
}

// badToken wraps one of tokenwire's reasons in ErrBadToken (only as text:
// callers test against ErrBadToken and the errors above).
func badToken(reason error) error {
	return fmt.Errorf("%w: %v", ErrBadToken, reason)
}

// ParseToken parses an unsigned token as produced by (*Session).Token or by
// a TokenCodec without a Key. A signed token, a token that expired (by the
// system clock) and any malformed, oversized or empty input return an error
// wrapping ErrBadToken; ParseToken never panics. To read signed tokens use
// TokenCodec.Decode.
func ParseToken(s string) (Token, error) {
	return decodeToken(s, nil, time.Now())
}

// TokenCodec encodes and decodes tokens, optionally HMAC-SHA256 signed and
// with an expiry. The zero TokenCodec produces and accepts the same unsigned
// tokens as (*Session).Token and ParseToken. A TokenCodec is a value with no
// mutable state: safe for concurrent use as long as its keys are not
// modified.
//
// The helpers that carry tokens across a trust boundary (pgreplicahttp,
// pgreplicagrpc, pgreplicajob) refuse a codec without Key unless told that
// unsigned tokens are wanted (ErrNoTokenKey): an unsigned token lets
// whoever holds it claim any position.
//
// To rotate the key, make the new one Key and the old one PreviousKeys in
// every process, then drop the old one once every token signed with it has
// expired (TTL) or left its cookie (pgreplicahttp's MaxAge).
type TokenCodec struct {
	// Key, when not empty, signs every encoded token and makes Decode
	// require a valid signature. Use at least 32 random bytes and keep it
	// secret; every process that reads the tokens needs the same key.
	Key []byte
	// PreviousKeys are keys Decode still accepts a signature of, with Key
	// set, while a rotation is under way; tokens are only ever signed with
	// Key. Each one tried costs an HMAC, on a token Key did not sign.
	PreviousKeys [][]byte
	// TTL, when positive, makes Encode set Expires to Now()+TTL.
	TTL time.Duration
	// Now returns the current time; nil means time.Now. Tests inject a
	// fixed clock here.
	Now func() time.Time
}

// ErrNoTokenKey reports a helper that carries tokens across a trust
// boundary (pgreplicahttp, pgreplicagrpc, pgreplicajob) given a TokenCodec
// without Key and not told that unsigned tokens are wanted (their
// Options.Unsigned, for development): anyone could then forge a token.
var ErrNoTokenKey = errors.New("pgreplica: no token key (set TokenCodec.Key, or Unsigned for development)")

func (c TokenCodec) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// Encode returns the text form of t. When c.TTL is positive it first sets
// t.Expires to c.Now()+c.TTL (replacing any expiry t had); otherwise it
// keeps t.Expires. When c.Key is set the token is signed.
func (c TokenCodec) Encode(t Token) string {
	if c.TTL > 0 {
		t.Expires = c.now().Add(c.TTL)
	}
	return encodeToken(t, c.Key)
}

// Decode parses a token produced by Encode with the same Key, or with one
// of PreviousKeys. With a Key it requires a valid signature (checked in
// constant time); without one it behaves like ParseToken (PreviousKeys
// are not looked at). A token whose Expires is not after c.Now() is
// rejected. Every failure wraps ErrBadToken; Decode never panics.
func (c TokenCodec) Decode(s string) (Token, error) {
	now := c.now()
	t, err := decodeToken(s, c.Key, now)
	if len(c.Key) == 0 {
		return t, err
	}
	for _, k := range c.PreviousKeys {
		if err != errTokenSignature {
			break
		}
		if len(k) > 0 {
			t, err = decodeToken(s, k, now)
		}
	}
	return t, err
}

// encodeToken builds the text form; key may be empty (unsigned). It
// encodes t's positions as tokenwire's Fields.Add normalises them, so
// that every Token encodes to a string that decodes.
func encodeToken(t Token, key []byte) string {
	f := tokenwire.Fields{Expires: t.Expires}
	f.Add(wirePos(t.first()))
	for _, p := range t.Others {
		f.Add(wirePos(p))
	}
	f.Overflow = f.Overflow || t.Overflow
	return tokenwire.Encode(f, key)
}

// decodeToken parses s. With a key the token must be signed with it; without
// one it must be unsigned. Tokens whose expiry is not after now are rejected.
func decodeToken(s string, key []byte, now time.Time) (Token, error) {
	f, err := tokenwire.Decode(s, key, now)
	if err != nil {
		if e, ok := tokenErrors[err]; ok {
			return Token{}, e
		}
		return Token{}, badToken(err)
	}
	return tokenOf(&f), nil // the positions are distinct and within the bound (Decode checked)
}
