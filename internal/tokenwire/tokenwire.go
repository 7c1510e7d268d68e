// Package tokenwire is the text form of pgreplica's tokens: the versioned
// binary layout, its base64url text, the HMAC-SHA256 signature and the
// expiry field (the layout is documented on pgreplica.Token). It encodes
// and decodes plain positions and needs no router and no session: the
// root package turns them into its Token and its errors. Its tests, and
// the fuzz test of decoding outside input, run with
// `go test ./internal/tokenwire/`.
package tokenwire

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"time"
)

// MaxClusters bounds the positions with a SystemID in one token; it is
// pgreplica.MaxClusters, which the root checks at compile time.
const MaxClusters = 8

// Wire format; see the pgreplica.Token documentation.
const (
	V1           = 1
	V2           = 2
	FlagSigned   = 0x01
	FlagExpires  = 0x02
	FlagOverflow = 0x04      // version 2 only
	PositionLen  = 8 + 4 + 8 // LSN, timeline, sysid
	V1HeadLen    = 1 + 1     // version, flags
	V2HeadLen    = 1 + 1 + 1 // version, flags, count
	MaxPositions = MaxClusters + 1
	ExpiresLen   = 8
	MACLen       = sha256.Size
	V1MaxRawLen  = V1HeadLen + PositionLen + ExpiresLen + MACLen
	MaxRawLen    = V2HeadLen + MaxPositions*PositionLen + ExpiresLen + MACLen

	// MaxText bounds the input Decode looks at: the text form of the
	// longest token (base64 without padding).
	MaxText = (MaxRawLen*4 + 2) / 3
	// MaxExpiry is 9999-12-31T23:59:59Z, the last second time.Time
	// formats and round-trips without surprises.
	MaxExpiry = 253402300799
)

// MACDomain separates pgreplica's MACs from any other use of the key.
const MACDomain = "pgreplica-token\x00"

var encoding = base64.RawURLEncoding.Strict()

// Why Decode rejects its input. Each is a short reason that never quotes
// the input, which may be attacker-controlled; the root wraps it in
// pgreplica.ErrBadToken.
var (
	ErrEmpty     = errors.New("empty")
	ErrOversized = fmt.Errorf("oversized (more than %d characters)", MaxText)
	ErrGarbled   = errors.New("garbled")
	ErrTruncated = errors.New("truncated")
	ErrVersion   = errors.New("unknown version")
	ErrNeedsKey  = errors.New("signed token needs a key")
	ErrUnsigned  = errors.New("unsigned token where a signature is required")
	ErrSignature = errors.New("bad signature")
	ErrExpired   = errors.New("expired")
	ErrClusters  = fmt.Errorf("more than %d clusters", MaxClusters)
	ErrDuplicate = errors.New("a cluster appears twice")
)

// Position is one cluster's position as the wire carries it.
type Position struct {
	LSN      uint64
	Timeline uint32
	SystemID uint64
}

// Fields are what a token's text carries. A token Decode accepts, and one
// Encode is given, has N from 1 to MaxPositions positions in Pos, no two
// with the same SystemID and at most MaxClusters with a SystemID other
// than 0; Add keeps that true.
type Fields struct {
	Pos      [MaxPositions]Position
	N        int
	Overflow bool
	// Expires is zero for a token that does not expire.
	Expires time.Time
}

// AppendMAC appends the HMAC of msg to dst.
func AppendMAC(dst, key, msg []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(MACDomain))
	m.Write(msg)
	return m.Sum(dst)
}
