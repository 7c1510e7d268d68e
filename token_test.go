package pgreplica

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"
)

var (
	testKey  = []byte("0123456789abcdef0123456789abcdef")
	testNow  = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	testTok  = Token{LSN: 0x16_B374D848, Timeline: 3, SystemID: 7449373393844797465}
	fixedNow = func() time.Time { return testNow }
)

func sameToken(a, b Token) bool {
	return a.LSN == b.LSN && a.Timeline == b.Timeline && a.SystemID == b.SystemID && a.Expires.Equal(b.Expires)
}

func decodeRaw(t *testing.T, s string) []byte {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		t.Fatalf("token %q is not base64url: %v", s, err)
	}
	return raw
}

func TestTokenFormat(t *testing.T) {
	s := TokenCodec{}.Encode(testTok)
	raw := decodeRaw(t, s)
	want := []byte{1, 0,
		0, 0, 0, 0x16, 0xB3, 0x74, 0xD8, 0x48,
		0, 0, 0, 3,
	}
	want = binary.BigEndian.AppendUint64(want, testTok.SystemID)
	if !bytes.Equal(raw, want) {
		t.Fatalf("unsigned token bytes\n got %x\nwant %x", raw, want)
	}
	if len(s) != 30 {
		t.Errorf("unsigned token is %d characters, want 30", len(s))
	}

	c := TokenCodec{Key: testKey, TTL: time.Hour, Now: fixedNow}
	s = c.Encode(testTok)
	raw = decodeRaw(t, s)
	if len(raw) != tokenMaxRawLen || len(s) != 83 {
		t.Fatalf("signed expiring token: %d bytes, %d characters; want %d, 83", len(raw), len(s), tokenMaxRawLen)
	}
	if raw[0] != 1 || raw[1] != tokenFlagSigned|tokenFlagExpires {
		t.Fatalf("header %x", raw[:2])
	}
	if exp := int64(binary.BigEndian.Uint64(raw[22:])); exp != testNow.Add(time.Hour).Unix() {
		t.Fatalf("expiry %d", exp)
	}
	m := hmac.New(sha256.New, testKey)
	m.Write([]byte("pgreplica-token\x00"))
	m.Write(raw[:30])
	if !bytes.Equal(m.Sum(nil), raw[30:]) {
		t.Fatalf("MAC is not HMAC-SHA256(key, domain || body)")
	}
	if strings.ContainsAny(s, "+/=") {
		t.Fatalf("token %q is not URL- and cookie-safe", s)
	}
}

func TestTokenRoundTrip(t *testing.T) {
	exp := testNow.Add(90 * time.Minute)
	codecs := map[string]TokenCodec{
		"unsigned":            {Now: fixedNow},
		"unsigned+ttl":        {TTL: time.Hour, Now: fixedNow},
		"signed":              {Key: testKey, Now: fixedNow},
		"signed+ttl":          {Key: testKey, TTL: time.Hour, Now: fixedNow},
		"signed+short key":    {Key: []byte("k"), Now: fixedNow},
		"signed+expires kept": {Key: testKey, Now: fixedNow},
	}
	for name, c := range codecs {
		in := testTok
		if name == "signed+expires kept" {
			in.Expires = exp.Add(123 * time.Millisecond) // rounded down
		}
		s := c.Encode(in)
		got, err := c.Decode(s)
		if err != nil {
			t.Errorf("%s: Decode: %v", name, err)
			continue
		}
		want := in
		switch {
		case c.TTL > 0:
			want.Expires = testNow.Add(c.TTL)
		case name == "signed+expires kept":
			want.Expires = exp
		}
		if !sameToken(got, want) {
			t.Errorf("%s: got %+v, want %+v", name, got, want)
		}
		if !got.Expires.IsZero() && got.Expires.Location() != time.UTC {
			t.Errorf("%s: Expires in %v, want UTC", name, got.Expires.Location())
		}
		if again := c.Encode(got); c.TTL == 0 && again != s {
			t.Errorf("%s: re-encoding gives %q, want %q", name, again, s)
		}
	}
	for _, tok := range []Token{{}, {LSN: ^LSN(0), Timeline: ^uint32(0), SystemID: ^uint64(0)}} {
		got, err := ParseToken(TokenCodec{}.Encode(tok))
		if err != nil || !sameToken(got, tok) {
			t.Errorf("ParseToken(Encode(%+v)) = %+v, %v", tok, got, err)
		}
	}
}

func TestTokenRejects(t *testing.T) {
	signer := TokenCodec{Key: testKey, Now: fixedNow}
	signed := signer.Encode(testTok)
	unsigned := TokenCodec{}.Encode(testTok)
	expiring := TokenCodec{TTL: time.Minute, Now: fixedNow}.Encode(testTok)

	reencode := func(raw []byte) string { return base64.RawURLEncoding.EncodeToString(raw) }
	withRaw := func(s string, f func([]byte) []byte) string { return reencode(f(decodeRaw(t, s))) }
	flip := func(s string, byteIdx int, bit byte) string {
		return withRaw(s, func(b []byte) []byte { b[byteIdx] ^= bit; return b })
	}
	resign := func(raw []byte) []byte { // a correctly signed token with any body
		return appendTokenMAC(raw, testKey, raw)
	}

	later := TokenCodec{Now: func() time.Time { return testNow.Add(time.Minute) }}
	laterSigned := TokenCodec{Key: testKey, TTL: time.Minute, Now: fixedNow}.Encode(testTok)

	cases := []struct {
		name  string
		codec TokenCodec
		in    string
		why   error
	}{
		{"empty", TokenCodec{}, "", errTokenEmpty},
		{"oversized", TokenCodec{}, strings.Repeat("A", maxTokenText+1), errTokenOversized},
		{"oversized garbage", signer, strings.Repeat("\xff", 1<<20), errTokenOversized},
		{"padding", TokenCodec{}, unsigned + "==", errTokenGarbled},
		{"std alphabet", TokenCodec{}, strings.ReplaceAll(strings.ReplaceAll(signed, "-", "+"), "_", "/") + "+", errTokenGarbled},
		{"newline", TokenCodec{}, unsigned[:10] + "\n" + unsigned[10:], errTokenGarbled},
		{"space", TokenCodec{}, " " + unsigned, errTokenGarbled},
		{"one char", TokenCodec{}, "A", errTokenGarbled},
		{"non-canonical tail bits", TokenCodec{}, unsigned[:len(unsigned)-1] + "B", errTokenGarbled},
		{"version 0", TokenCodec{}, flip(unsigned, 0, 1), errTokenVersion},
		{"version 2", TokenCodec{}, withRaw(unsigned, func(b []byte) []byte { b[0] = 2; return b }), errTokenVersion},
		{"version 255 short", TokenCodec{}, reencode([]byte{255}), errTokenVersion},
		{"version only", TokenCodec{}, reencode([]byte{1}), errTokenTruncated},
		{"unknown flag", TokenCodec{}, flip(unsigned, 1, 0x80), errTokenGarbled},
		{"truncated", TokenCodec{}, withRaw(unsigned, func(b []byte) []byte { return b[:len(b)-1] }), errTokenTruncated},
		{"truncated signed", signer, withRaw(signed, func(b []byte) []byte { return b[:len(b)-1] }), errTokenTruncated},
		{"signature dropped, flag kept", signer, withRaw(signed, func(b []byte) []byte { return b[:tokenBaseLen] }), errTokenTruncated},
		{"trailing byte", TokenCodec{}, withRaw(unsigned, func(b []byte) []byte { return append(b, 0) }), errTokenGarbled},
		{"signed without key", TokenCodec{}, signed, errTokenNeedsKey},
		{"unsigned with key", signer, unsigned, errTokenUnsigned},
		{"signature stripped", signer, withRaw(signed, func(b []byte) []byte { b[1] &^= tokenFlagSigned; return b[:tokenBaseLen] }), errTokenUnsigned},
		{"flipped LSN bit", signer, flip(signed, 9, 1), errTokenSignature},
		{"flipped timeline bit", signer, flip(signed, 13, 0x10), errTokenSignature},
		{"flipped sysid bit", signer, flip(signed, 21, 0x80), errTokenSignature},
		{"flipped MAC bit", signer, flip(signed, tokenBaseLen+5, 4), errTokenSignature},
		{"other key", TokenCodec{Key: []byte("another key, as long as the first"), Now: fixedNow}, signed, errTokenSignature},
		{"forged zero MAC", signer, withRaw(signed, func(b []byte) []byte {
			clear(b[tokenBaseLen:])
			return b
		}), errTokenSignature},
		{"MAC without the domain prefix", signer, withRaw(signed, func(b []byte) []byte {
			body := b[:tokenBaseLen]
			m := hmac.New(sha256.New, testKey)
			m.Write(body)
			return m.Sum(body)
		}), errTokenSignature},
		{"expired unsigned", later, expiring, errTokenExpired},
		{"expired signed", TokenCodec{Key: testKey, Now: func() time.Time { return testNow.Add(time.Hour) }}, laterSigned, errTokenExpired},
		{"expired at the second", TokenCodec{Key: testKey, Now: func() time.Time { return testNow.Add(time.Minute) }}, laterSigned, errTokenExpired},
		{"expiry zero", TokenCodec{}, withRaw(unsigned, func(b []byte) []byte {
			b[1] |= tokenFlagExpires
			return append(b, make([]byte, 8)...)
		}), errTokenGarbled},
		{"expiry past 9999 (signed)", signer, withRaw(signed, func(b []byte) []byte {
			b = b[:tokenBaseLen]
			b[1] |= tokenFlagExpires
			b = binary.BigEndian.AppendUint64(b, maxTokenExpiry+1)
			return resign(b)
		}), errTokenGarbled},
		{"expiry max int64", TokenCodec{}, withRaw(unsigned, func(b []byte) []byte {
			b[1] |= tokenFlagExpires
			return binary.BigEndian.AppendUint64(b, 1<<63)
		}), errTokenGarbled},
	}
	for _, c := range cases {
		got, err := c.codec.Decode(c.in)
		if err == nil {
			t.Errorf("%s: Decode accepted %q as %+v", c.name, c.in, got)
			continue
		}
		if !errors.Is(err, ErrBadToken) {
			t.Errorf("%s: error %v does not wrap ErrBadToken", c.name, err)
		}
		if !errors.Is(err, c.why) {
			t.Errorf("%s: error %q, want %q", c.name, err, c.why)
		}
		if got != (Token{}) {
			t.Errorf("%s: failed Decode returned %+v", c.name, got)
		}
		if len(c.in) > 2 && strings.Contains(err.Error(), c.in) {
			t.Errorf("%s: error %q reflects the input", c.name, err)
		}
		if len(c.codec.Key) == 0 {
			if _, perr := ParseToken(c.in); !errors.Is(perr, ErrBadToken) && c.why != errTokenExpired {
				t.Errorf("%s: ParseToken error %v", c.name, perr)
			}
		}
	}
}

func TestParseTokenExpiry(t *testing.T) {
	past := TokenCodec{}.Encode(Token{LSN: 1, Expires: time.Now().Add(-time.Second)})
	if _, err := ParseToken(past); !errors.Is(err, errTokenExpired) {
		t.Fatalf("ParseToken(expired) error %v", err)
	}
	future := TokenCodec{TTL: time.Hour}.Encode(Token{LSN: 1})
	if tok, err := ParseToken(future); err != nil || tok.LSN != 1 || tok.Expires.IsZero() {
		t.Fatalf("ParseToken(future) = %+v, %v", tok, err)
	}
	// An expiry before 1970 is clamped to 1970: still expired, still decodable.
	old := TokenCodec{}.Encode(Token{LSN: 1, Expires: time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)})
	if _, err := ParseToken(old); !errors.Is(err, errTokenExpired) {
		t.Fatalf("ParseToken(1900) error %v", err)
	}
	// One past year 9999 is clamped to 9999-12-31T23:59:59Z.
	far := TokenCodec{}.Encode(Token{LSN: 1, Expires: time.Date(12000, 1, 1, 0, 0, 0, 0, time.UTC)})
	if tok, err := ParseToken(far); err != nil || tok.Expires.Year() != 9999 {
		t.Fatalf("ParseToken(year 12000) = %+v, %v", tok, err)
	}
}

func TestTokenErrorsAreShort(t *testing.T) {
	for _, err := range []error{errTokenEmpty, errTokenOversized, errTokenGarbled, errTokenTruncated, errTokenVersion,
		errTokenNeedsKey, errTokenUnsigned, errTokenSignature, errTokenExpired, errTokenOtherCluster} {
		if !errors.Is(err, ErrBadToken) || !strings.HasPrefix(err.Error(), ErrBadToken.Error()+": ") {
			t.Errorf("%q does not wrap ErrBadToken with a reason", err)
		}
	}
}

func TestSessionTokenCodec(t *testing.T) {
	s := NewSession()
	s.advance(0x10_00000020, 2, 99)
	c := TokenCodec{Key: testKey, TTL: time.Minute, Now: fixedNow}
	tok, err := c.Decode(c.SessionToken(s))
	if err != nil {
		t.Fatal(err)
	}
	want := Token{LSN: 0x10_00000020, Timeline: 2, SystemID: 99, Expires: testNow.Add(time.Minute)}
	if !sameToken(tok, want) {
		t.Fatalf("got %+v, want %+v", tok, want)
	}
	if _, err := ParseToken(c.SessionToken(s)); !errors.Is(err, errTokenNeedsKey) {
		t.Fatalf("ParseToken(signed) error %v", err)
	}
	var nilSession *Session
	if tok, err := ParseToken(nilSession.Token()); err != nil || tok != (Token{}) {
		t.Fatalf("nil session token = %+v, %v", tok, err)
	}
}

func TestParseTokenAllocs(t *testing.T) {
	s := TokenCodec{}.Encode(testTok)
	if n := testing.AllocsPerRun(100, func() { _, _ = ParseToken(s) }); n > 1 {
		t.Errorf("ParseToken allocates %v times", n)
	}
	long := strings.Repeat("A", 10_000)
	if n := testing.AllocsPerRun(100, func() { _, _ = ParseToken(long) }); n != 0 {
		t.Errorf("rejecting an oversized token allocates %v times", n)
	}
}

func FuzzParseToken(f *testing.F) {
	codec := TokenCodec{Key: testKey, Now: fixedNow}
	f.Add(TokenCodec{}.Encode(testTok))
	f.Add(TokenCodec{}.Encode(Token{}))
	f.Add(TokenCodec{TTL: time.Hour}.Encode(testTok))
	f.Add(codec.Encode(testTok))
	f.Add(TokenCodec{Key: testKey, TTL: time.Hour, Now: fixedNow}.Encode(testTok))
	f.Add("")
	f.Add("AQ")
	f.Add("AQA")
	f.Add(strings.Repeat("_", 300))
	f.Fuzz(func(t *testing.T, s string) {
		for _, c := range []struct {
			name string
			dec  func(string) (Token, error)
			enc  TokenCodec
		}{
			{"ParseToken", ParseToken, TokenCodec{}},
			{"Decode", codec.Decode, TokenCodec{Key: codec.Key}},
		} {
			tok, err := c.dec(s)
			if err != nil {
				if !errors.Is(err, ErrBadToken) {
					t.Fatalf("%s(%q) error %v does not wrap ErrBadToken", c.name, s, err)
				}
				if tok != (Token{}) {
					t.Fatalf("%s(%q) failed but returned %+v", c.name, s, tok)
				}
				if len(s) > 3 && strings.Contains(err.Error(), s) {
					t.Fatalf("%s error %q reflects the input", c.name, err)
				}
				continue
			}
			if len(s) > maxTokenText {
				t.Fatalf("%s accepted %d characters", c.name, len(s))
			}
			if again := c.enc.Encode(tok); again != s {
				t.Fatalf("%s(%q) = %+v re-encodes to %q", c.name, s, tok, again)
			}
		}
	})
}

func FuzzTokenEncodeDecode(f *testing.F) {
	f.Add(uint64(testTok.LSN), testTok.Timeline, testTok.SystemID, int64(0), false)
	f.Add(uint64(0), uint32(0), uint64(0), testNow.Add(time.Hour).Unix(), true)
	f.Add(^uint64(0), ^uint32(0), ^uint64(0), int64(maxTokenExpiry), true)
	f.Fuzz(func(t *testing.T, lsn uint64, tl uint32, sysid uint64, exp int64, signed bool) {
		in := Token{LSN: LSN(lsn), Timeline: tl, SystemID: sysid}
		if exp != 0 {
			in.Expires = time.Unix(exp, 0)
		}
		c := TokenCodec{Now: fixedNow}
		if signed {
			c.Key = testKey
		}
		s := c.Encode(in)
		if len(s) > 83 || len(s) > maxTokenText {
			t.Fatalf("token of %d characters", len(s))
		}
		got, err := c.Decode(s)
		switch {
		case exp != 0 && min(max(exp, 1), maxTokenExpiry) <= testNow.Unix():
			if !errors.Is(err, errTokenExpired) {
				t.Fatalf("expired token: %+v, %v", got, err)
			}
		case err != nil:
			t.Fatalf("Decode(Encode(%+v)): %v", in, err)
		case got.LSN != in.LSN || got.Timeline != tl || got.SystemID != sysid:
			t.Fatalf("round trip %+v -> %+v", in, got)
		case exp != 0 && got.Expires.Unix() != min(exp, maxTokenExpiry):
			t.Fatalf("expiry %d -> %v", exp, got.Expires)
		}
	})
}
