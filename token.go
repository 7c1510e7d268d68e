package pgreplica

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"time"
)

// Token is a read requirement that travels between processes: in a cookie,
// an HTTP header, a queue message or a server-side store. It says "a read
// must see the primary's WAL up to LSN". (*Session).Token and
// TokenCodec.SessionToken produce one; ParseToken and TokenCodec.Decode read
// one back; (*Session).Merge and WithToken apply it.
//
// # Text form
//
// A token is base64url without padding (RFC 4648 §5: letters, digits, '-'
// and '_'), so it needs no escaping in a URL, a cookie or a header. It is at
// most 83 characters long; input longer than 256 characters is rejected
// before any decoding. The decoded bytes, all integers big-endian, are:
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
// The HMAC is computed with TokenCodec.Key over the 16 bytes
// "pgreplica-token\x00" followed by every byte before the HMAC, and is
// verified in constant time. Every encoding is canonical: a string that
// parses re-encodes to itself.
//
// # Failover rule
//
// The LSN of a token is honoured across timelines. A promoted standby starts
// its new timeline at the position where it stopped replaying and continues
// the same LSN sequence, so "replayed at least LSN" keeps its meaning after
// a promotion: a server on the new timeline that reached the token's LSN
// holds every write of the token's session that survived the failover. A
// token from an older timeline is therefore never rejected; if its write was
// lost in the failover, reads wait for (or fall back to the primary until)
// the new timeline's WAL passes that LSN, which is conservative but correct.
// Timeline records the highest timeline the producing session saw, for
// diagnostics. SystemID identifies the cluster (pg_control_system()'s
// system_identifier): LSNs of two different clusters are unrelated, so a
// token whose SystemID differs from the cluster's (or the Session's) is
// rejected with an error wrapping ErrBadToken when it is applied; a zero
// SystemID on either side means unknown and matches any cluster.
type Token struct {
	// LSN is the WAL position a read must see.
	LSN LSN
	// Timeline is the highest timeline of the primary the token's session
	// saw; 0 means unknown.
	Timeline uint32
	// SystemID is the cluster's system identifier; 0 means unknown.
	SystemID uint64
	// Expires, when not zero, is when the token stops being accepted. It is
	// carried with one-second precision (rounded down).
	Expires time.Time
}

// Token wire format; see the Token documentation.
const (
	tokenVersion     = 1
	tokenFlagSigned  = 0x01
	tokenFlagExpires = 0x02
	tokenBaseLen     = 1 + 1 + 8 + 4 + 8 // version, flags, LSN, timeline, sysid
	tokenExpiresLen  = 8
	tokenMACLen      = sha256.Size
	tokenMaxRawLen   = tokenBaseLen + tokenExpiresLen + tokenMACLen

	// maxTokenText bounds the input ParseToken and Decode look at.
	maxTokenText = 256
	// maxTokenExpiry is 9999-12-31T23:59:59Z, the last second time.Time
	// formats and round-trips without surprises.
	maxTokenExpiry = 253402300799
)

// tokenMACDomain separates pgreplica's MACs from any other use of the key.
const tokenMACDomain = "pgreplica-token\x00"

var tokenEncoding = base64.RawURLEncoding.Strict()

// Token errors. Each wraps ErrBadToken with a short reason and never quotes
// the input, which may be attacker-controlled.
var (
	errTokenEmpty        = fmt.Errorf("%w: empty", ErrBadToken)
	errTokenOversized    = fmt.Errorf("%w: oversized (more than %d characters)", ErrBadToken, maxTokenText)
	errTokenGarbled      = fmt.Errorf("%w: garbled", ErrBadToken)
	errTokenTruncated    = fmt.Errorf("%w: truncated", ErrBadToken)
	errTokenVersion      = fmt.Errorf("%w: unknown version", ErrBadToken)
	errTokenNeedsKey     = fmt.Errorf("%w: signed token needs a key", ErrBadToken)
	errTokenUnsigned     = fmt.Errorf("%w: unsigned token where a signature is required", ErrBadToken)
	errTokenSignature    = fmt.Errorf("%w: bad signature", ErrBadToken)
	errTokenExpired      = fmt.Errorf("%w: expired", ErrBadToken)
	errTokenOtherCluster = fmt.Errorf("%w: token from a different cluster (system identifier mismatch)", ErrBadToken)
)

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
// mutable state: safe for concurrent use as long as Key is not modified.
//
// A driver's Config.TokenKey and Config.TokenTTL configure the equivalent
// TokenCodec{Key: cfg.TokenKey, TTL: cfg.TokenTTL}.
type TokenCodec struct {
	// Key, when not empty, signs every encoded token and makes Decode
	// require a valid signature. Use at least 32 random bytes and keep it
	// secret; every process that reads the tokens needs the same key.
	Key []byte
	// TTL, when positive, makes Encode set Expires to Now()+TTL.
	TTL time.Duration
	// Now returns the current time; nil means time.Now. Tests inject a
	// fixed clock here.
	Now func() time.Time
}

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

// Decode parses a token produced by Encode with the same Key. With a Key it
// requires a valid signature (checked in constant time); without one it
// behaves like ParseToken. A token whose Expires is not after c.Now() is
// rejected. Every failure wraps ErrBadToken; Decode never panics.
func (c TokenCodec) Decode(s string) (Token, error) {
	return decodeToken(s, c.Key, c.now())
}

// SessionToken returns the text form of the session's current watermark,
// encoded (signed, with an expiry) as Encode does. A nil session gives the
// token of the zero LSN.
func (c TokenCodec) SessionToken(s *Session) string {
	return c.Encode(s.Snapshot())
}

// encodeToken builds the text form; key may be empty (unsigned).
func encodeToken(t Token, key []byte) string {
	var buf [tokenMaxRawLen]byte
	raw := buf[:tokenBaseLen]
	raw[0] = tokenVersion
	binary.BigEndian.PutUint64(raw[2:], uint64(t.LSN))
	binary.BigEndian.PutUint32(raw[10:], t.Timeline)
	binary.BigEndian.PutUint64(raw[14:], t.SystemID)
	if !t.Expires.IsZero() {
		raw[1] |= tokenFlagExpires
		// An expiry before 1970 is as expired as one in 1970; one past
		// year 9999 is as good as none. Clamping keeps every encoding
		// decodable with the same meaning.
		sec := min(max(t.Expires.Unix(), 1), maxTokenExpiry)
		raw = binary.BigEndian.AppendUint64(raw, uint64(sec))
	}
	if len(key) > 0 {
		raw[1] |= tokenFlagSigned
		raw = appendTokenMAC(raw, key, raw)
	}
	return tokenEncoding.EncodeToString(raw)
}

// appendTokenMAC appends the HMAC of msg to dst.
func appendTokenMAC(dst, key, msg []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(tokenMACDomain))
	m.Write(msg)
	return m.Sum(dst)
}

// decodeToken parses s. With a key the token must be signed with it; without
// one it must be unsigned. Tokens whose expiry is not after now are rejected.
func decodeToken(s string, key []byte, now time.Time) (Token, error) {
	switch {
	case len(s) == 0:
		return Token{}, errTokenEmpty
	case len(s) > maxTokenText:
		return Token{}, errTokenOversized
	}
	// The base64 decoder skips '\r' and '\n'; accept only the alphabet so
	// that a token has exactly one text form.
	for i := 0; i < len(s); i++ {
		if !isTokenChar(s[i]) {
			return Token{}, errTokenGarbled
		}
	}
	var buf [maxTokenText * 3 / 4]byte
	n, err := tokenEncoding.Decode(buf[:], []byte(s))
	if err != nil {
		return Token{}, errTokenGarbled
	}
	raw := buf[:n]
	if len(raw) == 0 {
		return Token{}, errTokenGarbled
	}
	if raw[0] != tokenVersion {
		return Token{}, errTokenVersion
	}
	if len(raw) < 2 {
		return Token{}, errTokenTruncated
	}
	flags := raw[1]
	if flags&^(tokenFlagSigned|tokenFlagExpires) != 0 {
		return Token{}, errTokenGarbled
	}
	want := tokenBaseLen
	if flags&tokenFlagExpires != 0 {
		want += tokenExpiresLen
	}
	signed := flags&tokenFlagSigned != 0
	if signed {
		want += tokenMACLen
	}
	switch {
	case len(raw) < want:
		return Token{}, errTokenTruncated
	case len(raw) > want:
		return Token{}, errTokenGarbled
	}
	switch {
	case signed && len(key) == 0:
		return Token{}, errTokenNeedsKey
	case !signed && len(key) > 0:
		return Token{}, errTokenUnsigned
	case signed:
		body := raw[:want-tokenMACLen]
		var macBuf [tokenMACLen]byte
		if !hmac.Equal(appendTokenMAC(macBuf[:0], key, body), raw[len(body):]) {
			return Token{}, errTokenSignature
		}
	}
	t := Token{
		LSN:      LSN(binary.BigEndian.Uint64(raw[2:])),
		Timeline: binary.BigEndian.Uint32(raw[10:]),
		SystemID: binary.BigEndian.Uint64(raw[14:]),
	}
	if flags&tokenFlagExpires != 0 {
		sec := binary.BigEndian.Uint64(raw[tokenBaseLen:])
		if sec < 1 || sec > maxTokenExpiry {
			return Token{}, errTokenGarbled
		}
		t.Expires = time.Unix(int64(sec), 0).UTC()
		if !now.Before(t.Expires) {
			return Token{}, errTokenExpired
		}
	}
	return t, nil
}

func isTokenChar(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}
