package probe

import (
	"database/sql/driver"
	"errors"
	"strconv"
)

// The inner drivers answer text as string (pgx) or []byte (lib/pq), and
// integers as int64 or, when the SQL casts them to text (a system
// identifier does not fit int8), as text.

// Text reads a text value; NULL is "".
func Text(v driver.Value) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	}
	return ""
}

// LSN reads a pg_lsn that arrived as text; NULL or "" is 0.
func LSN(v driver.Value) (uint64, error) {
	switch x := v.(type) {
	case string:
		if x != "" {
			return ParseLSN(x)
		}
	case []byte:
		if len(x) != 0 {
			return ParseLSN(x)
		}
	}
	return 0, nil
}

// Int reads an integer; NULL is 0.
func Int(v driver.Value) (int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	case nil:
		return 0, nil
	}
	s := Text(v)
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		// system identifiers are unsigned 64-bit values
		u, uerr := strconv.ParseUint(s, 10, 64)
		if uerr != nil {
			return 0, errors.New("probe: unexpected integer " + strconv.Quote(s))
		}
		return int64(u), nil
	}
	return n, nil
}
