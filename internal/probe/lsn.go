package probe

import (
	"errors"
	"fmt"
	"strconv"
)

// maxLSNPart is the most hex digits PostgreSQL accepts in each half of an
// LSN's text form (MAXPG_LSNCOMPONENT).
const maxLSNPart = 8

// errLSN is the common prefix of ParseLSN's errors.
const errLSN = "pgreplica: invalid LSN"

// ParseLSN parses PostgreSQL's text form of a pg_lsn, "X/Y" with 1 to 8
// hex digits each, exactly as PostgreSQL's input accepts it (the root's
// ParseLSN documents it). Text or bytes, so a []byte is not copied.
func ParseLSN[T string | []byte](s T) (uint64, error) {
	var parts [2]uint64
	part, digits := 0, 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		case c == '/' && part == 0:
			if digits == 0 {
				return 0, lsnError(s, "missing digits before '/'")
			}
			part, digits = 1, 0
			continue
		default:
			if c == '/' {
				return 0, lsnError(s, "more than one '/'")
			}
			if c >= 0x80 {
				return 0, lsnError(s, fmt.Sprintf("unexpected byte 0x%02X", c))
			}
			return 0, lsnError(s, "unexpected character "+strconv.QuoteRune(rune(c)))
		}
		if digits == maxLSNPart {
			return 0, lsnError(s, "more than 8 hex digits in a part")
		}
		parts[part] = parts[part]<<4 | uint64(d)
		digits++
	}
	switch {
	case len(s) == 0:
		return 0, errors.New(errLSN + ": empty string (want X/Y, e.g. 16/B374D848)")
	case part == 0:
		return 0, lsnError(s, "missing '/'")
	case digits == 0:
		return 0, lsnError(s, "missing digits after '/'")
	}
	return parts[0]<<32 | parts[1], nil
}

// AppendLSN appends PostgreSQL's text form of an LSN, upper-case hex
// without leading zeros ("16/B374D848", "0/0"), to b.
func AppendLSN(b []byte, lsn uint64) []byte {
	b = appendUpperHex(b, uint32(lsn>>32))
	b = append(b, '/')
	return appendUpperHex(b, uint32(lsn))
}

func appendUpperHex(b []byte, v uint32) []byte {
	const hexDigits = "0123456789ABCDEF"
	if v == 0 {
		return append(b, '0')
	}
	shift := 28
	for v>>shift == 0 {
		shift -= 4
	}
	for ; shift >= 0; shift -= 4 {
		b = append(b, hexDigits[v>>shift&0xF])
	}
	return b
}

// lsnError reports a malformed LSN. The input is quoted (so control
// characters cannot forge log lines) and clipped (it may come from outside).
func lsnError[T string | []byte](s T, why string) error {
	const maxShown = 40
	shown := string(s)
	if len(shown) > maxShown {
		shown = shown[:maxShown] + "..."
	}
	return fmt.Errorf("%s %q: %s (want X/Y with 1-8 hex digits each, e.g. 16/B374D848)", errLSN, shown, why)
}

// WAL page geometry of every PostgreSQL build we support: 8 kB pages,
// whose first page of a segment carries a long header.
const (
	walPageSize       = 8192
	walShortHeader    = 24 // SizeOfXLogShortPHD
	walLongHeader     = 40 // SizeOfXLogLongPHD
	walMinSegmentSize = 1 << 20
)

// ReachableLSN maps an insert position that sits just past a page header
// back to the page boundary. When the last record ended exactly at a page
// end, pg_current_wal_insert_lsn() points past the next page's header, but
// a replica's replay position stops at the boundary and only passes it
// when the next record arrives — on an idle primary, seconds later. The
// bytes in between are a header, not data, so the boundary is as good.
func ReachableLSN(lsn uint64) uint64 {
	off := lsn % walPageSize
	switch {
	case off == walShortHeader:
		return lsn - walShortHeader
	case off == walLongHeader && lsn%walMinSegmentSize == walLongHeader:
		return lsn - walLongHeader
	}
	return lsn
}
