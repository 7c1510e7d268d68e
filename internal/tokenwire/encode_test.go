package tokenwire

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"testing"
	"time"
)

func TestEncodeLayout(t *testing.T) {
	b := raw(Encode(one, nil))
	want := binary.BigEndian.AppendUint64([]byte{V1, 0, 0, 0, 0, 0x16, 0xB3, 0x74, 0xD8, 0x48, 0, 0, 0, 3}, one.Pos[0].SystemID)
	if !bytes.Equal(b, want) {
		t.Fatalf("version 1 bytes\n got %x\nwant %x", b, want)
	}

	f := multi
	f.Expires = testNow.Add(time.Hour)
	b = raw(Encode(f, testKey))
	if b[0] != V2 || b[1] != FlagSigned|FlagExpires || b[2] != 3 || len(b) != V2HeadLen+3*PositionLen+ExpiresLen+MACLen {
		t.Fatalf("version 2 header %x, %d bytes", b[:3], len(b))
	}
	body := len(b) - MACLen
	if exp := binary.BigEndian.Uint64(b[body-ExpiresLen:]); int64(exp) != f.Expires.Unix() {
		t.Fatalf("expiry %d", exp)
	}
	m := hmac.New(sha256.New, testKey)
	m.Write(append([]byte("pgreplica-token\x00"), b[:body]...))
	if mac := m.Sum(nil); !bytes.Equal(mac, b[body:]) {
		t.Fatal("MAC is not HMAC-SHA256(key, domain || body)")
	}

	b = raw(Encode(fields(true, time.Time{}, Position{LSN: 1}), nil))
	if b[0] != V2 || b[1] != FlagOverflow || b[2] != 1 {
		t.Fatalf("overflow of one position: header %x", b[:3])
	}

	s := Encode(full(), testKey)
	if len(s) != MaxText || MaxText != 298 || len(raw(s)) != MaxRawLen {
		t.Fatalf("longest token: %d characters, bound %d", len(s), MaxText)
	}
	if s := Encode(fields(false, time.Unix(MaxExpiry, 0), one.Pos[0]), testKey); len(raw(s)) != V1MaxRawLen || len(s) != 83 {
		t.Fatalf("longest version 1 token: %d characters", len(s))
	}
}

func TestEncodeClampsExpiry(t *testing.T) {
	for _, tc := range []struct {
		in   time.Time
		want int64
	}{
		{time.Unix(-5, 0), 1},
		{time.Unix(0, 0), 1},
		{time.Unix(MaxExpiry+1, 0), MaxExpiry},
		{time.Unix(1e12, 0), MaxExpiry},
		{time.Unix(42, 999_999_999), 42},
	} {
		b := raw(Encode(fields(false, tc.in, Position{LSN: 1}), nil))
		if got := int64(binary.BigEndian.Uint64(b[V1HeadLen+PositionLen:])); got != tc.want {
			t.Errorf("expiry %v encodes as %d, want %d", tc.in, got, tc.want)
		}
	}
}
