package tokenwire

import (
	"encoding/base64"
	"errors"
	"testing"
	"time"
)

func fields(overflow bool, expires time.Time, ps ...Position) Fields {
	f := Fields{N: len(ps), Overflow: overflow, Expires: expires}
	copy(f.Pos[:], ps)
	return f
}

var (
	testKey = []byte("0123456789abcdef0123456789abcdef")
	testNow = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	one     = fields(false, time.Time{}, Position{LSN: 0x16_B374D848, Timeline: 3, SystemID: 7449373393844797465})
	multi   = fields(false, time.Time{},
		Position{LSN: 0x16_B374D848, Timeline: 3, SystemID: 7449373393844797465},
		Position{LSN: 0x3_00000100, Timeline: 1, SystemID: 7449373393844797999},
		Position{LSN: 0x42, Timeline: 1})
)

// full is the longest token: MaxClusters clusters, an unknown one,
// overflow, an expiry and a signature.
func full() Fields {
	f := Fields{N: MaxPositions, Overflow: true, Expires: time.Unix(MaxExpiry, 0).UTC()}
	for i := range MaxClusters {
		f.Pos[i] = Position{LSN: ^uint64(0), Timeline: ^uint32(0), SystemID: uint64(i) + 1}
	}
	f.Pos[MaxClusters] = Position{LSN: 77, Timeline: 1}
	return f
}

// raw returns the bytes of s, which comes from Encode or text; a test
// that gets it wrong fails on the bytes it finds missing.
func raw(s string) []byte {
	b, _ := base64.RawURLEncoding.DecodeString(s)
	return b
}

func text(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func TestErrorsAreDistinct(t *testing.T) {
	seen := map[string]bool{}
	for _, err := range []error{ErrEmpty, ErrOversized, ErrGarbled, ErrTruncated, ErrVersion,
		ErrNeedsKey, ErrUnsigned, ErrSignature, ErrExpired, ErrClusters, ErrDuplicate} {
		if seen[err.Error()] || errors.Unwrap(err) != nil {
			t.Errorf("reason %q repeated or wrapping", err)
		}
		seen[err.Error()] = true
	}
}
