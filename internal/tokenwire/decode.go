package tokenwire

import (
	"crypto/hmac"
	"encoding/binary"
	"time"
)

// Decode parses s. With a key the token must be signed with it; without
// one it must be unsigned. Tokens whose expiry is not after now are
// rejected. Every failure is one of the Err values and returns zero
// Fields; Decode never panics and looks at no more than MaxText bytes.
func Decode(s string, key []byte, now time.Time) (Fields, error) {
	switch {
	case len(s) == 0:
		return Fields{}, ErrEmpty
	case len(s) > MaxText:
		return Fields{}, ErrOversized
	}
	// The base64 decoder skips '\r' and '\n'; accept only the alphabet so
	// that a token has exactly one text form.
	for i := 0; i < len(s); i++ {
		if !isTokenChar(s[i]) {
			return Fields{}, ErrGarbled
		}
	}
	var buf [MaxText * 3 / 4]byte
	n, err := encoding.Decode(buf[:], []byte(s))
	if err != nil {
		return Fields{}, ErrGarbled
	}
	raw := buf[:n]
	if len(raw) == 0 {
		return Fields{}, ErrGarbled
	}
	version := raw[0]
	if version != V1 && version != V2 {
		return Fields{}, ErrVersion
	}
	if len(raw) < 2 {
		return Fields{}, ErrTruncated
	}
	flags := raw[1]
	known := byte(FlagSigned | FlagExpires)
	if version == V2 {
		known |= FlagOverflow
	}
	if flags&^known != 0 {
		return Fields{}, ErrGarbled
	}
	overflow := flags&FlagOverflow != 0
	head, count := V1HeadLen, 1
	if version == V2 {
		if len(raw) < V2HeadLen {
			return Fields{}, ErrTruncated
		}
		head, count = V2HeadLen, int(raw[2])
		switch {
		case count > MaxPositions:
			return Fields{}, ErrClusters
		case count == 0, count == 1 && !overflow:
			// One position without overflow is a version 1 token:
			// accepting it here would give it two text forms.
			return Fields{}, ErrGarbled
		}
	}
	bodyLen := head + count*PositionLen
	want := bodyLen
	if flags&FlagExpires != 0 {
		want += ExpiresLen
	}
	signed := flags&FlagSigned != 0
	if signed {
		want += MACLen
	}
	switch {
	case len(raw) < want:
		return Fields{}, ErrTruncated
	case len(raw) > want:
		return Fields{}, ErrGarbled
	}
	switch {
	case signed && len(key) == 0:
		return Fields{}, ErrNeedsKey
	case !signed && len(key) > 0:
		return Fields{}, ErrUnsigned
	case signed:
		body := raw[:want-MACLen]
		var macBuf [MACLen]byte
		if !hmac.Equal(AppendMAC(macBuf[:0], key, body), raw[len(body):]) {
			return Fields{}, ErrSignature
		}
	}
	f := Fields{Overflow: overflow}
	withID := 0
	for i := range count {
		b := raw[head+i*PositionLen:]
		p := Position{
			LSN:      binary.BigEndian.Uint64(b),
			Timeline: binary.BigEndian.Uint32(b[8:]),
			SystemID: binary.BigEndian.Uint64(b[12:]),
		}
		for _, q := range f.Pos[:f.N] {
			if q.SystemID == p.SystemID {
				return Fields{}, ErrDuplicate
			}
		}
		if p.SystemID != 0 {
			if withID == MaxClusters {
				return Fields{}, ErrClusters
			}
			withID++
		}
		f.Pos[f.N] = p
		f.N++
	}
	if flags&FlagExpires != 0 {
		sec := binary.BigEndian.Uint64(raw[bodyLen:])
		if sec < 1 || sec > MaxExpiry {
			return Fields{}, ErrGarbled
		}
		f.Expires = time.Unix(int64(sec), 0).UTC()
		if !now.Before(f.Expires) {
			return Fields{}, ErrExpired
		}
	}
	return f, nil
}

func isTokenChar(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}
