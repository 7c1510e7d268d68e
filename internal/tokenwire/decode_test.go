package tokenwire

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"
)

func TestDecodeRoundTrip(t *testing.T) {
	exp := testNow.Add(time.Hour)
	for _, f := range []Fields{one, multi, full(), fields(true, exp, Position{LSN: 9, SystemID: 3})} {
		for _, key := range [][]byte{nil, testKey, []byte("k")} {
			if f.Expires.IsZero() {
				f.Expires = exp
			}
			s := Encode(f, key)
			got, err := Decode(s, key, testNow)
			if err != nil || got != f {
				t.Fatalf("Decode(Encode(%+v)) = %+v, %v", f, got, err)
			}
			if again := Encode(got, key); again != s {
				t.Fatalf("re-encodes to %q, want %q", again, s)
			}
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	unsigned := Encode(one, nil)
	signed := Encode(one, testKey)
	twoSigned := Encode(multi, testKey)
	v2 := func(flags byte, ps ...Position) string {
		b := []byte{V2, flags, byte(len(ps))}
		for _, p := range ps {
			b = binary.BigEndian.AppendUint64(b, p.LSN)
			b = binary.BigEndian.AppendUint32(b, p.Timeline)
			b = binary.BigEndian.AppendUint64(b, p.SystemID)
		}
		return text(b)
	}
	var nine []Position
	for i := range uint64(MaxClusters + 1) {
		nine = append(nine, Position{SystemID: i + 1, LSN: 1})
	}
	withExpiry := func(sec uint64) string {
		b := raw(unsigned)
		b[1] |= FlagExpires
		return text(binary.BigEndian.AppendUint64(b, sec))
	}
	for _, tc := range []struct {
		name string
		in   string
		key  []byte
		want error
	}{
		{"empty", "", nil, ErrEmpty},
		{"oversized", strings.Repeat("A", MaxText+1), nil, ErrOversized},
		{"newline", unsigned[:5] + "\n" + unsigned[5:], nil, ErrGarbled},
		{"padding", unsigned + "==", nil, ErrGarbled},
		{"one char", "A", nil, ErrGarbled},
		{"version 0", text([]byte{0, 0}), nil, ErrVersion},
		{"version only", text([]byte{V1}), nil, ErrTruncated},
		{"v1 overflow flag", text(append([]byte{V1, FlagOverflow}, make([]byte, PositionLen)...)), nil, ErrGarbled},
		{"v2 no count", text([]byte{V2, 0}), nil, ErrTruncated},
		{"v2 count 0", v2(0), nil, ErrGarbled},
		{"v2 one position", v2(0, Position{LSN: 1}), nil, ErrGarbled},
		{"v2 count 255", text([]byte{V2, 0, 255}), nil, ErrClusters},
		{"v2 known past the bound", v2(0, nine...), nil, ErrClusters},
		{"v2 cluster twice", v2(0, Position{SystemID: 1}, Position{SystemID: 1, LSN: 2}), nil, ErrDuplicate},
		{"truncated", text(raw(unsigned)[:V1HeadLen+PositionLen-1]), nil, ErrTruncated},
		{"trailing byte", text(append(raw(unsigned), 0)), nil, ErrGarbled},
		{"signed without key", signed, nil, ErrNeedsKey},
		{"unsigned with key", unsigned, testKey, ErrUnsigned},
		{"other key", twoSigned, []byte("k"), ErrSignature},
		{"expiry 0", withExpiry(0), nil, ErrGarbled},
		{"expiry past 9999", withExpiry(MaxExpiry + 1), nil, ErrGarbled},
		{"expired", withExpiry(uint64(testNow.Unix())), nil, ErrExpired},
	} {
		got, err := Decode(tc.in, tc.key, testNow)
		if err != tc.want || got != (Fields{}) {
			t.Errorf("%s: Decode = %+v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
	if _, err := Decode(withExpiry(uint64(testNow.Unix())+1), nil, testNow); err != nil {
		t.Errorf("a token expiring the second after now: %v", err)
	}
}

func TestDecodeAllocs(t *testing.T) {
	// The one allocation is the decode buffer, which escapes through
	// base64's Decode; the root's Token adds its Others slice.
	s, long := Encode(multi, nil), strings.Repeat("A", 10_000)
	if n := testing.AllocsPerRun(100, func() { _, _ = Decode(long, nil, testNow) }); n != 0 {
		t.Errorf("rejecting an oversized token allocates %v times", n)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = Decode(s, nil, testNow) }); n > 1 {
		t.Errorf("decoding an unsigned token allocates %v times", n)
	}
}
