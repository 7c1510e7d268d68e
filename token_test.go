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

	"github.com/pgreplica/pgreplica/internal/tokenwire"
)

var (
	testKey  = []byte("0123456789abcdef0123456789abcdef")
	testNow  = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	testTok  = Token{LSN: 0x16_B374D848, Timeline: 3, SystemID: 7449373393844797465}
	fixedNow = func() time.Time { return testNow }
	// testMulti is a token of two clusters and of positions taken before
	// the cluster was known.
	testMulti = Token{LSN: 0x16_B374D848, Timeline: 3, SystemID: 7449373393844797465, Others: []Position{
		{SystemID: 7449373393844797999, Timeline: 1, LSN: 0x3_00000100},
		{Timeline: 1, LSN: 0x42},
	}}
)

// fullToken returns a token of MaxClusters clusters and an unknown one:
// the longest there is.
func fullToken() Token {
	t := Token{LSN: ^LSN(0), Timeline: ^uint32(0), SystemID: ^uint64(0)}
	for i := range uint64(MaxClusters - 1) {
		t.Others = append(t.Others, Position{SystemID: i + 1, Timeline: 2, LSN: LSN(i+1) << 40})
	}
	t.Others = append(t.Others, Position{Timeline: 1, LSN: 77})
	return t
}

// v1BodyLen is the length of a version 1 token before its expiry and MAC.
const v1BodyLen = tokenwire.V1HeadLen + tokenwire.PositionLen

func sameToken(a, b Token) bool { return a.Equal(b) }

// isZeroToken reports whether t is the zero Token, as failed decodes return.
func isZeroToken(t Token) bool {
	return t.Equal(Token{}) && t.Others == nil && t.Expires == (time.Time{})
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
	if len(raw) != tokenwire.V1MaxRawLen || len(s) != 83 {
		t.Fatalf("signed expiring token: %d bytes, %d characters; want %d, 83", len(raw), len(s), tokenwire.V1MaxRawLen)
	}
	if raw[0] != 1 || raw[1] != tokenwire.FlagSigned|tokenwire.FlagExpires {
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
		for _, in := range []Token{testTok, testMulti, {LSN: 9, SystemID: 3, Overflow: true}, fullToken()} {
			roundTrip(t, name, c, in, exp)
		}
	}
	for _, tok := range []Token{{}, {LSN: ^LSN(0), Timeline: ^uint32(0), SystemID: ^uint64(0)}, {Others: []Position{{SystemID: 5, LSN: 1}}}} {
		got, err := ParseToken(TokenCodec{}.Encode(tok))
		if err != nil || !sameToken(got, tok) {
			t.Errorf("ParseToken(Encode(%+v)) = %+v, %v", tok, got, err)
		}
	}
}

func roundTrip(t *testing.T, name string, c TokenCodec, in Token, exp time.Time) {
	t.Helper()
	{
		if name == "signed+expires kept" {
			in.Expires = exp.Add(123 * time.Millisecond) // rounded down
		}
		s := c.Encode(in)
		if len(s) > tokenwire.MaxText {
			t.Errorf("%s: %d characters", name, len(s))
		}
		got, err := c.Decode(s)
		if err != nil {
			t.Errorf("%s: Decode: %v", name, err)
			return
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
}

func TestTokenFormatV2(t *testing.T) {
	s := TokenCodec{}.Encode(testMulti)
	raw := decodeRaw(t, s)
	want := []byte{2, 0, 3}
	for _, p := range testMulti.Positions() {
		want = binary.BigEndian.AppendUint64(want, uint64(p.LSN))
		want = binary.BigEndian.AppendUint32(want, p.Timeline)
		want = binary.BigEndian.AppendUint64(want, p.SystemID)
	}
	if !bytes.Equal(raw, want) {
		t.Fatalf("unsigned version 2 token bytes\n got %x\nwant %x", raw, want)
	}
	// The first 22 bytes after the count are a version 1 token's.
	v1 := decodeRaw(t, TokenCodec{}.Encode(testTok))
	if !bytes.Equal(raw[3:3+tokenwire.PositionLen], v1[2:]) {
		t.Fatal("a version 2 position is not laid out as in version 1")
	}

	over := testMulti
	over.Overflow = true
	c := TokenCodec{Key: testKey, TTL: time.Hour, Now: fixedNow}
	raw = decodeRaw(t, c.Encode(over))
	if raw[0] != 2 || raw[1] != tokenwire.FlagSigned|tokenwire.FlagExpires|tokenwire.FlagOverflow || raw[2] != 3 {
		t.Fatalf("header %x", raw[:3])
	}
	body := 3 + 3*tokenwire.PositionLen
	if len(raw) != body+8+32 {
		t.Fatalf("%d bytes", len(raw))
	}
	if exp := int64(binary.BigEndian.Uint64(raw[body:])); exp != testNow.Add(time.Hour).Unix() {
		t.Fatalf("expiry %d", exp)
	}
	m := hmac.New(sha256.New, testKey)
	m.Write([]byte("pgreplica-token\x00"))
	m.Write(raw[:body+8])
	if !bytes.Equal(m.Sum(nil), raw[body+8:]) {
		t.Fatalf("MAC is not HMAC-SHA256(key, domain || body)")
	}

	// The longest token is exactly the text bound.
	full := c.Encode(fullToken())
	if tokenwire.MaxText != 298 || len(full) != tokenwire.MaxText || len(decodeRaw(t, full)) != tokenwire.MaxRawLen {
		t.Fatalf("longest token: %d characters, bound %d", len(full), tokenwire.MaxText)
	}

	// One position with overflow is a version 2 token of one position.
	raw = decodeRaw(t, TokenCodec{}.Encode(Token{LSN: 1, SystemID: 2, Overflow: true}))
	if raw[0] != 2 || raw[1] != tokenwire.FlagOverflow || raw[2] != 1 || len(raw) != 3+tokenwire.PositionLen {
		t.Fatalf("single position with overflow: %x", raw)
	}
}

// TestTokenV1Compatibility: tokens written by version 1 encoders (in
// cookies and stores today) still parse, and a single cluster still
// encodes to them.
func TestTokenV1Compatibility(t *testing.T) {
	exp := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		in    string
		codec TokenCodec
		want  Token
	}{
		{"AQAAAAAWs3TYSAAAAANnYX2iG12AGQ", TokenCodec{}, testTok},
		{"AQMAAAAWs3TYSAAAAANnYX2iG12AGQAAAABw3VUl9UiwR3OjTo6oCHqyQuihwTzBijeMd3qmxNWSzy6NC6Y",
			TokenCodec{Key: testKey, Now: fixedNow},
			Token{LSN: testTok.LSN, Timeline: 3, SystemID: testTok.SystemID, Expires: exp}},
	} {
		got, err := c.codec.Decode(c.in)
		if err != nil || !sameToken(got, c.want) {
			t.Errorf("Decode(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
		if again := c.codec.Encode(got); again != c.in {
			t.Errorf("re-encoding %+v gives %q, want %q", got, again, c.in)
		}
	}
}

// TestTokenEncodeNormalizes: a Token built by hand with a cluster twice or
// too many clusters still encodes to a token that decodes, and that
// requires at least as much on every cluster.
func TestTokenEncodeNormalizes(t *testing.T) {
	dup := Token{LSN: 5, SystemID: 1, Others: []Position{{SystemID: 2, LSN: 7}, {SystemID: 1, Timeline: 4, LSN: 9}, {SystemID: 1, LSN: 3}}}
	got, err := ParseToken(TokenCodec{}.Encode(dup))
	want := Token{LSN: 9, Timeline: 4, SystemID: 1, Others: []Position{{SystemID: 2, LSN: 7}}}
	if err != nil || !sameToken(got, want) {
		t.Fatalf("duplicates: %+v, %v; want %+v", got, err, want)
	}

	many := Token{LSN: 1, SystemID: 1}
	for i := range uint64(MaxClusters + 2) {
		many.Others = append(many.Others, Position{SystemID: i + 2, LSN: LSN(i + 2)})
	}
	many.Others = append(many.Others, Position{LSN: 3})
	got, err = ParseToken(TokenCodec{}.Encode(many))
	if err != nil {
		t.Fatal(err)
	}
	if !got.Overflow || len(got.Positions()) != MaxClusters+1 {
		t.Fatalf("too many clusters: %+v", got)
	}
	for _, p := range many.Positions() {
		if got.LSNFor(p.SystemID) < p.LSN {
			t.Errorf("cluster %d needs %v after encoding, %v before", p.SystemID, got.LSNFor(p.SystemID), p.LSN)
		}
	}
	if got.LSNFor(MaxClusters) != MaxClusters || got.LSNFor(MaxClusters+1) != unreachableLSN {
		t.Fatalf("kept the wrong clusters: %+v", got)
	}
}

func TestTokenLSNFor(t *testing.T) {
	for _, c := range []struct {
		name  string
		tok   Token
		sysid uint64
		want  LSN
	}{
		{"zero token", Token{}, 5, 0},
		{"own cluster", Token{LSN: 10, SystemID: 5}, 5, 10},
		{"other cluster", Token{LSN: 10, SystemID: 5}, 6, 0},
		{"unknown read cluster", Token{LSN: 10, SystemID: 5}, 0, 10},
		{"unknown token cluster", Token{LSN: 10}, 6, 10},
		{"multi: first", testMulti, testMulti.SystemID, testMulti.LSN},
		{"multi: second", testMulti, 7449373393844797999, 0x3_00000100},
		{"multi: unknown applies", testMulti, 1, 0x42},
		{"multi: unknown read cluster", testMulti, 0, testMulti.LSN},
		{"unknown above own", Token{LSN: 10, SystemID: 5, Others: []Position{{LSN: 20}}}, 5, 20},
		{"overflow: tracked", Token{LSN: 10, SystemID: 5, Overflow: true}, 5, 10},
		{"overflow: untracked", Token{LSN: 10, SystemID: 5, Overflow: true}, 6, unreachableLSN},
		{"overflow: unknown read cluster", Token{LSN: 10, SystemID: 5, Overflow: true}, 0, unreachableLSN},
	} {
		if got := c.tok.LSNFor(c.sysid); got != c.want {
			t.Errorf("%s: LSNFor(%d) = %v, want %v", c.name, c.sysid, got, c.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = testMulti.LSNFor(1) }); n != 0 {
		t.Errorf("LSNFor allocates %v times", n)
	}
}

func TestTokenMerge(t *testing.T) {
	const a, b, c = 0xA, 0xB, 0xC
	t1 := testNow.Add(time.Minute)
	t2 := testNow.Add(time.Hour)
	for _, tc := range []struct {
		name    string
		t, u    Token
		want    Token
		changed bool
	}{
		{"into empty", Token{}, Token{LSN: 5, SystemID: a}, Token{LSN: 5, SystemID: a}, true},
		{"empty into", Token{LSN: 5, SystemID: a}, Token{}, Token{LSN: 5, SystemID: a}, false},
		{"higher wins", Token{LSN: 5, SystemID: a}, Token{LSN: 6, Timeline: 2, SystemID: a}, Token{LSN: 6, Timeline: 2, SystemID: a}, true},
		{"lower loses", Token{LSN: 5, SystemID: a}, Token{LSN: 4, Timeline: 2, SystemID: a}, Token{LSN: 5, SystemID: a}, false},
		{"tie keeps t", Token{LSN: 5, Timeline: 1, SystemID: a}, Token{LSN: 5, Timeline: 2, SystemID: a}, Token{LSN: 5, Timeline: 1, SystemID: a}, false},
		{"per cluster", Token{LSN: 5, SystemID: a, Others: []Position{{SystemID: b, LSN: 9}}},
			Token{LSN: 3, SystemID: b, Others: []Position{{SystemID: a, LSN: 1}, {SystemID: c, LSN: 2}, {LSN: 4}}},
			Token{LSN: 5, SystemID: a, Others: []Position{{SystemID: b, LSN: 9}, {SystemID: c, LSN: 2}, {LSN: 4}}}, true},
		{"zero LSNs left out", Token{SystemID: a, Others: []Position{{SystemID: b, LSN: 9}}}, Token{SystemID: c},
			Token{LSN: 9, SystemID: b}, false},
		{"overflow carries", Token{LSN: 5, SystemID: a}, Token{Overflow: true}, Token{LSN: 5, SystemID: a, Overflow: true}, true},
		{"overflow kept", Token{LSN: 5, SystemID: a, Overflow: true}, Token{LSN: 1, SystemID: a}, Token{LSN: 5, SystemID: a, Overflow: true}, false},
		{"later expiry", Token{LSN: 5, SystemID: a, Expires: t1}, Token{LSN: 1, SystemID: a, Expires: t2}, Token{LSN: 5, SystemID: a, Expires: t2}, true},
		{"earlier expiry", Token{LSN: 5, SystemID: a, Expires: t2}, Token{LSN: 6, SystemID: a, Expires: t1}, Token{LSN: 6, SystemID: a, Expires: t2}, true},
		{"no expiry wins", Token{LSN: 5, SystemID: a, Expires: t1}, Token{LSN: 1, SystemID: b}, Token{LSN: 5, SystemID: a, Others: []Position{{SystemID: b, LSN: 1}}}, true},
		{"empty token does not extend", Token{LSN: 5, SystemID: a, Expires: t1}, Token{Expires: t2}, Token{LSN: 5, SystemID: a, Expires: t1}, false},
		{"into an empty token with expiry", Token{Expires: t2}, Token{LSN: 5, SystemID: a, Expires: t1}, Token{LSN: 5, SystemID: a, Expires: t1}, true},
	} {
		got, changed := tc.t.Merge(tc.u)
		if !sameToken(got, tc.want) || changed != tc.changed {
			t.Errorf("%s: %+v, %v; want %+v, %v", tc.name, got, changed, tc.want, tc.changed)
		}
	}

	// Past the bound: the first clusters stay, the others overflow.
	full := fullToken()
	got, changed := full.Merge(Token{LSN: 1, SystemID: 999})
	if !changed || !got.Overflow || len(got.Positions()) != MaxClusters+1 || got.LSNFor(999) != unreachableLSN {
		t.Fatalf("merge past the bound: %+v, %v", got, changed)
	}
	if _, changed := got.Merge(Token{LSN: 2, SystemID: 1000}); changed {
		t.Fatal("a second cluster past the bound changed an overflowed token")
	}
	// Merge shares no slice with its operands.
	m, _ := testMulti.Merge(Token{})
	m.Others[0].LSN = 1
	if testMulti.Others[0].LSN == 1 {
		t.Fatal("Merge returned t's Others")
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
		return tokenwire.AppendMAC(raw, testKey, raw)
	}

	later := TokenCodec{Now: func() time.Time { return testNow.Add(time.Minute) }}
	laterSigned := TokenCodec{Key: testKey, TTL: time.Minute, Now: fixedNow}.Encode(testTok)

	multi := TokenCodec{}.Encode(testMulti)
	multiSigned := signer.Encode(testMulti)
	v2 := func(flags byte, ps ...Position) []byte { // a version 2 body as given
		b := []byte{2, flags, byte(len(ps))}
		for _, p := range ps {
			b = binary.BigEndian.AppendUint64(b, uint64(p.LSN))
			b = binary.BigEndian.AppendUint32(b, p.Timeline)
			b = binary.BigEndian.AppendUint64(b, p.SystemID)
		}
		return b
	}
	nine := make([]Position, MaxClusters+1)
	for i := range nine {
		nine[i] = Position{SystemID: uint64(i + 1), LSN: 1}
	}
	ten := append(append([]Position(nil), nine...), Position{LSN: 1})

	cases := []struct {
		name  string
		codec TokenCodec
		in    string
		why   error
	}{
		{"v2: header only", TokenCodec{}, reencode([]byte{2, 0}), errTokenTruncated},
		{"v2: no positions", TokenCodec{}, reencode(v2(0)), errTokenGarbled},
		{"v2: one position without overflow", TokenCodec{}, reencode(v2(0, Position{SystemID: 1, LSN: 1})), errTokenGarbled},
		{"v2: count past the bound", TokenCodec{}, reencode(v2(0, ten...)), errTokenClusters},
		{"v2: count 255", TokenCodec{}, reencode([]byte{2, 0, 255}), errTokenClusters},
		{"v2: more known clusters than the bound", TokenCodec{}, reencode(v2(0, nine...)), errTokenClusters},
		{"v2: a cluster twice", TokenCodec{}, reencode(v2(0, Position{SystemID: 1, LSN: 1}, Position{SystemID: 2}, Position{SystemID: 1, LSN: 2})), errTokenDuplicate},
		{"v2: unknown cluster twice", TokenCodec{}, reencode(v2(0, Position{LSN: 1}, Position{LSN: 2})), errTokenDuplicate},
		{"v2: a cluster twice, signed", signer, reencode(resign(v2(tokenwire.FlagSigned, Position{SystemID: 1, LSN: 1}, Position{SystemID: 1, LSN: 2}))), errTokenDuplicate},
		{"v2: count says more", TokenCodec{}, withRaw(multi, func(b []byte) []byte { b[2]++; return b }), errTokenTruncated},
		{"v2: count says fewer", TokenCodec{}, withRaw(multi, func(b []byte) []byte { b[2]--; return b }), errTokenGarbled},
		{"v2: truncated", TokenCodec{}, withRaw(multi, func(b []byte) []byte { return b[:len(b)-1] }), errTokenTruncated},
		{"v2: trailing byte", TokenCodec{}, withRaw(multi, func(b []byte) []byte { return append(b, 0) }), errTokenGarbled},
		{"v2: unknown flag", TokenCodec{}, flip(multi, 1, 0x08), errTokenGarbled},
		{"v1: overflow flag", TokenCodec{}, flip(unsigned, 1, tokenwire.FlagOverflow), errTokenGarbled},
		{"v2: flipped position bit", signer, flip(multiSigned, 3+tokenwire.PositionLen+19, 1), errTokenSignature},
		{"v2: flipped count", signer, flip(multiSigned, 2, 4), errTokenTruncated},
		{"v2: overflow flag added", signer, flip(multiSigned, 1, tokenwire.FlagOverflow), errTokenSignature},
		{"v2: signed without key", TokenCodec{}, multiSigned, errTokenNeedsKey},
		{"v2: unsigned with key", signer, multi, errTokenUnsigned},
		{"v2: expired", later, TokenCodec{TTL: time.Minute, Now: fixedNow}.Encode(testMulti), errTokenExpired},
		{"v2: oversized", signer, TokenCodec{Key: testKey, TTL: time.Hour, Now: fixedNow}.Encode(fullToken()) + "A", errTokenOversized},
		{"empty", TokenCodec{}, "", errTokenEmpty},
		{"oversized", TokenCodec{}, strings.Repeat("A", tokenwire.MaxText+1), errTokenOversized},
		{"oversized garbage", signer, strings.Repeat("\xff", 1<<20), errTokenOversized},
		{"padding", TokenCodec{}, unsigned + "==", errTokenGarbled},
		{"std alphabet", TokenCodec{}, strings.ReplaceAll(strings.ReplaceAll(signed, "-", "+"), "_", "/") + "+", errTokenGarbled},
		{"newline", TokenCodec{}, unsigned[:10] + "\n" + unsigned[10:], errTokenGarbled},
		{"space", TokenCodec{}, " " + unsigned, errTokenGarbled},
		{"one char", TokenCodec{}, "A", errTokenGarbled},
		{"non-canonical tail bits", TokenCodec{}, unsigned[:len(unsigned)-1] + "B", errTokenGarbled},
		{"version 0", TokenCodec{}, flip(unsigned, 0, 1), errTokenVersion},
		{"version 3", TokenCodec{}, withRaw(unsigned, func(b []byte) []byte { b[0] = 3; return b }), errTokenVersion},
		{"version 255 short", TokenCodec{}, reencode([]byte{255}), errTokenVersion},
		{"version only", TokenCodec{}, reencode([]byte{1}), errTokenTruncated},
		{"unknown flag", TokenCodec{}, flip(unsigned, 1, 0x80), errTokenGarbled},
		{"truncated", TokenCodec{}, withRaw(unsigned, func(b []byte) []byte { return b[:len(b)-1] }), errTokenTruncated},
		{"truncated signed", signer, withRaw(signed, func(b []byte) []byte { return b[:len(b)-1] }), errTokenTruncated},
		{"signature dropped, flag kept", signer, withRaw(signed, func(b []byte) []byte { return b[:v1BodyLen] }), errTokenTruncated},
		{"trailing byte", TokenCodec{}, withRaw(unsigned, func(b []byte) []byte { return append(b, 0) }), errTokenGarbled},
		{"signed without key", TokenCodec{}, signed, errTokenNeedsKey},
		{"unsigned with key", signer, unsigned, errTokenUnsigned},
		{"signature stripped", signer, withRaw(signed, func(b []byte) []byte { b[1] &^= tokenwire.FlagSigned; return b[:v1BodyLen] }), errTokenUnsigned},
		{"flipped LSN bit", signer, flip(signed, 9, 1), errTokenSignature},
		{"flipped timeline bit", signer, flip(signed, 13, 0x10), errTokenSignature},
		{"flipped sysid bit", signer, flip(signed, 21, 0x80), errTokenSignature},
		{"flipped MAC bit", signer, flip(signed, v1BodyLen+5, 4), errTokenSignature},
		{"other key", TokenCodec{Key: []byte("another key, as long as the first"), Now: fixedNow}, signed, errTokenSignature},
		{"forged zero MAC", signer, withRaw(signed, func(b []byte) []byte {
			clear(b[v1BodyLen:])
			return b
		}), errTokenSignature},
		{"MAC without the domain prefix", signer, withRaw(signed, func(b []byte) []byte {
			body := b[:v1BodyLen]
			m := hmac.New(sha256.New, testKey)
			m.Write(body)
			return m.Sum(body)
		}), errTokenSignature},
		{"expired unsigned", later, expiring, errTokenExpired},
		{"expired signed", TokenCodec{Key: testKey, Now: func() time.Time { return testNow.Add(time.Hour) }}, laterSigned, errTokenExpired},
		{"expired at the second", TokenCodec{Key: testKey, Now: func() time.Time { return testNow.Add(time.Minute) }}, laterSigned, errTokenExpired},
		{"expiry zero", TokenCodec{}, withRaw(unsigned, func(b []byte) []byte {
			b[1] |= tokenwire.FlagExpires
			return append(b, make([]byte, 8)...)
		}), errTokenGarbled},
		{"expiry past 9999 (signed)", signer, withRaw(signed, func(b []byte) []byte {
			b = b[:v1BodyLen]
			b[1] |= tokenwire.FlagExpires
			b = binary.BigEndian.AppendUint64(b, tokenwire.MaxExpiry+1)
			return resign(b)
		}), errTokenGarbled},
		{"expiry max int64", TokenCodec{}, withRaw(unsigned, func(b []byte) []byte {
			b[1] |= tokenwire.FlagExpires
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
		if !isZeroToken(got) {
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
		errTokenNeedsKey, errTokenUnsigned, errTokenSignature, errTokenExpired, errTokenClusters, errTokenDuplicate} {
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
	if tok, err := ParseToken(nilSession.Token()); err != nil || !isZeroToken(tok) {
		t.Fatalf("nil session token = %+v, %v", tok, err)
	}
}

func TestParseTokenAllocs(t *testing.T) {
	s := TokenCodec{}.Encode(testTok)
	if n := testing.AllocsPerRun(100, func() { _, _ = ParseToken(s) }); n > 1 {
		t.Errorf("ParseToken allocates %v times", n)
	}
	multi := TokenCodec{}.Encode(testMulti)
	if n := testing.AllocsPerRun(100, func() { _, _ = ParseToken(multi) }); n > 2 {
		t.Errorf("ParseToken of a version 2 token allocates %v times", n)
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
	f.Add(TokenCodec{}.Encode(testMulti))
	f.Add(TokenCodec{}.Encode(fullToken()))
	f.Add(TokenCodec{}.Encode(Token{LSN: 1, Overflow: true}))
	f.Add(codec.Encode(testMulti))
	f.Add(TokenCodec{Key: testKey, TTL: time.Hour, Now: fixedNow}.Encode(fullToken()))
	f.Add("AgA")
	f.Add("AgAC")
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
				if !isZeroToken(tok) {
					t.Fatalf("%s(%q) failed but returned %+v", c.name, s, tok)
				}
				if len(s) > 3 && strings.Contains(err.Error(), s) {
					t.Fatalf("%s error %q reflects the input", c.name, err)
				}
				continue
			}
			if len(s) > tokenwire.MaxText {
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
	f.Add(^uint64(0), ^uint32(0), ^uint64(0), int64(tokenwire.MaxExpiry), true)
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
		if len(s) > 83 {
			t.Fatalf("single-cluster token of %d characters", len(s))
		}
		got, err := c.Decode(s)
		switch {
		case exp != 0 && min(max(exp, 1), tokenwire.MaxExpiry) <= testNow.Unix():
			if !errors.Is(err, errTokenExpired) {
				t.Fatalf("expired token: %+v, %v", got, err)
			}
		case err != nil:
			t.Fatalf("Decode(Encode(%+v)): %v", in, err)
		case got.LSN != in.LSN || got.Timeline != tl || got.SystemID != sysid:
			t.Fatalf("round trip %+v -> %+v", in, got)
		case exp != 0 && got.Expires.Unix() != min(exp, tokenwire.MaxExpiry):
			t.Fatalf("expiry %d -> %v", exp, got.Expires)
		}
	})
}

// FuzzTokenPositions encodes tokens of any positions (clusters repeated,
// more than the bound, zero system identifiers) and decodes them: the
// result decodes, re-encodes to the same string, stays within the text
// bound and requires at least what the input did on every cluster.
func FuzzTokenPositions(f *testing.F) {
	f.Add([]byte{}, int64(0), false, false)
	f.Add(bytes.Repeat([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}, 3), int64(0), true, false)
	f.Add(bytes.Repeat([]byte{0, 0, 0, 0, 0, 0, 0, 9}, 40), testNow.Add(time.Hour).Unix(), true, true)
	f.Add(make([]byte, 20*12), int64(tokenwire.MaxExpiry), false, true)
	f.Fuzz(func(t *testing.T, data []byte, exp int64, signed, overflow bool) {
		// Small system identifiers so that clusters repeat.
		var ps []Position
		for len(data) >= 13 && len(ps) < 3*MaxClusters {
			ps = append(ps, Position{LSN: LSN(binary.BigEndian.Uint64(data)), Timeline: binary.BigEndian.Uint32(data[8:]), SystemID: uint64(data[12] % 12)})
			data = data[13:]
		}
		in := Token{Overflow: overflow}
		if len(ps) > 0 {
			in.LSN, in.Timeline, in.SystemID = ps[0].LSN, ps[0].Timeline, ps[0].SystemID
			in.Others = ps[1:]
		}
		if exp != 0 {
			in.Expires = time.Unix(exp, 0)
		}
		c := TokenCodec{Now: fixedNow}
		if signed {
			c.Key = testKey
		}
		s := c.Encode(in)
		if len(s) > tokenwire.MaxText {
			t.Fatalf("token of %d characters", len(s))
		}
		got, err := c.Decode(s)
		switch {
		case exp != 0 && min(max(exp, 1), tokenwire.MaxExpiry) <= testNow.Unix():
			if !errors.Is(err, errTokenExpired) {
				t.Fatalf("expired token: %+v, %v", got, err)
			}
			return
		case err != nil:
			t.Fatalf("Decode(Encode(%+v)): %v", in, err)
		}
		if again := c.Encode(got); again != s {
			t.Fatalf("%+v re-encodes to %q, want %q", got, again, s)
		}
		if got.Overflow != (overflow || got.Overflow) || len(got.Positions()) > MaxClusters+1 {
			t.Fatalf("%+v from %+v", got, in)
		}
		for _, p := range in.Positions() {
			if got.LSNFor(p.SystemID) < p.LSN {
				t.Fatalf("cluster %d needs %v after the round trip, %v before", p.SystemID, got.LSNFor(p.SystemID), p.LSN)
			}
		}
		for sysid := range uint64(13) {
			if got.LSNFor(sysid) < in.LSNFor(sysid) {
				t.Fatalf("LSNFor(%d) fell from %v to %v", sysid, in.LSNFor(sysid), got.LSNFor(sysid))
			}
		}
	})
}

// TestTokenCodecPreviousKeys: Decode accepts a signature of a previous
// key (an empty one skipped), reports a token of an unknown key as a bad
// signature and an expired one as expired, and without Key looks at no
// previous key.
func TestTokenCodecPreviousKeys(t *testing.T) {
	oldKey, newKey := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	rotating := TokenCodec{Key: newKey, PreviousKeys: [][]byte{nil, oldKey}, Now: clock}
	tok := Token{LSN: 0x77, SystemID: 9}
	for name, c := range map[string]TokenCodec{"old": {Key: oldKey}, "new": {Key: newKey}} {
		got, err := rotating.Decode(c.Encode(tok))
		if err != nil || !got.Equal(tok) {
			t.Errorf("a token of the %s key: %+v, %v", name, got, err)
		}
	}
	if _, err := rotating.Decode(TokenCodec{Key: bytes.Repeat([]byte{3}, 32)}.Encode(tok)); err != errTokenSignature {
		t.Errorf("a token of an unknown key: %v", err)
	}
	expired := TokenCodec{Key: oldKey, TTL: time.Minute, Now: func() time.Time { return now.Add(-time.Hour) }}
	if _, err := rotating.Decode(expired.Encode(tok)); err != errTokenExpired {
		t.Errorf("an expired token of the old key: %v", err)
	}
	if _, err := (TokenCodec{PreviousKeys: [][]byte{oldKey}}).Decode(TokenCodec{Key: oldKey}.Encode(tok)); err != errTokenNeedsKey {
		t.Errorf("previous keys without Key: %v", err)
	}
}
