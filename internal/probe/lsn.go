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

// ReachableLSN maps a position at a WAL page boundary, or just past the
// page's header, to one a replica's replay reaches without waiting for
// the next flush, and that still covers every commit at or before it.
//
// A replica replays whole records: its replay position stops at the end of
// the last record it has in full. At a boundary it stops short of it
// whenever a record spans the boundary: the primary flushes whole pages in
// the background (the WAL writer; pg_current_wal_flush_lsn() then sits on
// a boundary, inside that record), and the rest of the record follows
// with the next flush — on a quiet primary up to wal_writer_delay later,
// measured 200 ms. Likewise past a page header, where the insert position
// points when the last record ended exactly at the page's end.
//
// Any commit the replica has not replayed starts at or after its replay
// position R and is at least minCommitRecord bytes long, so it ends at or
// before a boundary B only if R <= B-minCommitRecord. A replica at
// B-minCommitRecord+1 or further has therefore replayed every commit that
// ended by B, and sees every write the primary showed at B.
func ReachableLSN(lsn uint64) uint64 {
	switch off := lsn % walPageSize; {
	case off == walShortHeader:
		lsn -= walShortHeader
	case off == walLongHeader && lsn%walMinSegmentSize == walLongHeader:
		lsn -= walLongHeader
	case off != 0:
		return lsn
	}
	if lsn < minCommitRecord {
		return lsn
	}
	return lsn - (minCommitRecord - 1)
}

// minCommitRecord is the length of the shortest WAL record that makes a
// write visible: a commit, with its 24-byte record header, 2-byte data
// header and 8-byte commit time. A record that changes a page is longer
// (its block reference alone takes 20 bytes).
const minCommitRecord = 34
