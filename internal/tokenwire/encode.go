package tokenwire

import "encoding/binary"

// Encode returns the text form of f; key may be empty (unsigned). A
// single position without overflow is version 1, which readers that know
// only version 1 keep reading; anything else is version 2.
func Encode(f Fields, key []byte) string {
	var buf [MaxRawLen]byte
	var raw []byte
	if f.N == 1 && !f.Overflow {
		raw = append(buf[:0], V1, 0)
	} else {
		raw = append(buf[:0], V2, 0, byte(f.N))
		if f.Overflow {
			raw[1] |= FlagOverflow
		}
	}
	for _, p := range f.Pos[:f.N] {
		raw = binary.BigEndian.AppendUint64(raw, p.LSN)
		raw = binary.BigEndian.AppendUint32(raw, p.Timeline)
		raw = binary.BigEndian.AppendUint64(raw, p.SystemID)
	}
	if !f.Expires.IsZero() {
		raw[1] |= FlagExpires
		// An expiry before 1970 is as expired as one in 1970; one past
		// year 9999 is as good as none. Clamping keeps every encoding
		// decodable with the same meaning.
		sec := min(max(f.Expires.Unix(), 1), MaxExpiry)
		raw = binary.BigEndian.AppendUint64(raw, uint64(sec))
	}
	if len(key) > 0 {
		raw[1] |= FlagSigned
		raw = AppendMAC(raw, key, raw)
	}
	return encoding.EncodeToString(raw)
}
