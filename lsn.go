package pgreplica

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"
)

// LSN is a PostgreSQL write-ahead log position (the pg_lsn type): a 64-bit
// byte offset into the WAL stream. Positions compare numerically, so use
// <, <= and > on LSN values and never compare their text forms
// ("0/FFFFFF" sorts after "0/1000000" as text but is the lower position).
//
// LSN implements sql.Scanner and driver.Valuer, so it can be scanned from
// and passed as a pg_lsn value with either inner driver:
//
//	var lsn pgreplica.LSN
//	err := db.QueryRowContext(ctx, "SELECT pg_current_wal_lsn()").Scan(&lsn)
//
// The zero LSN (0/0) means "no position": every server has reached it.
type LSN uint64

// maxLSNPart is the most hex digits PostgreSQL accepts in each half of an
// LSN's text form (MAXPG_LSNCOMPONENT).
const maxLSNPart = 8

// errLSN is the common prefix of ParseLSN's errors.
const errLSN = "pgreplica: invalid LSN"

// ParseLSN parses PostgreSQL's text form of an LSN, "X/Y", where X and Y are
// the high and low 32 bits written as 1 to 8 hexadecimal digits each (either
// case, leading zeros allowed), for example "16/B374D848" or "0/0". It
// accepts exactly what PostgreSQL's pg_lsn input accepts: no sign, no "0x"
// prefix, no spaces. Any other input returns an error that says why.
func ParseLSN(s string) (LSN, error) {
	return parseLSN(s)
}

// parseLSN is ParseLSN for text or bytes, so Scan does not copy a []byte.
func parseLSN[T string | []byte](s T) (LSN, error) {
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
	return LSN(parts[0]<<32 | parts[1]), nil
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

// String returns the LSN in PostgreSQL's text form, upper-case hex without
// leading zeros, e.g. "16/B374D848"; the zero LSN is "0/0".
func (l LSN) String() string {
	var buf [17]byte
	return string(l.appendText(buf[:0]))
}

func (l LSN) appendText(b []byte) []byte {
	b = appendUpperHex(b, uint32(l>>32))
	b = append(b, '/')
	return appendUpperHex(b, uint32(l))
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

// Scan implements sql.Scanner. It accepts the pg_lsn text that pgx and
// lib/pq return (as a string or []byte); a NULL (for example
// pg_last_wal_replay_lsn() on a primary) scans as the zero LSN.
func (l *LSN) Scan(src any) error {
	var (
		v   LSN
		err error
	)
	switch src := src.(type) {
	case nil:
	case string:
		v, err = parseLSN(src)
	case []byte:
		v, err = parseLSN(src)
	default:
		return fmt.Errorf("pgreplica: cannot scan %T into LSN (want pg_lsn text)", src)
	}
	if err != nil {
		return err
	}
	*l = v
	return nil
}

// Value implements driver.Valuer: an LSN is sent as its text form, which
// PostgreSQL reads as a pg_lsn (add an explicit ::pg_lsn cast where the
// parameter's type cannot be inferred).
func (l LSN) Value() (driver.Value, error) {
	return l.String(), nil
}

// MarshalText implements encoding.TextMarshaler with the text form of
// String, so an LSN travels in JSON and similar formats as "16/B374D848".
func (l LSN) MarshalText() ([]byte, error) {
	return l.appendText(make([]byte, 0, 17)), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with the syntax of
// ParseLSN.
func (l *LSN) UnmarshalText(text []byte) error {
	v, err := parseLSN(text)
	if err != nil {
		return err
	}
	*l = v
	return nil
}
