package pgreplica

import (
	"database/sql/driver"
	"fmt"
	"sync/atomic"

	"github.com/pgreplica/pgreplica/internal/probe"
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
	l, err := probe.ParseLSN(s)
	return LSN(l), err
}

// lsnValue reads a pg_lsn that arrived as text; NULL or "" is 0.
func lsnValue(v driver.Value) (LSN, error) {
	l, err := probe.LSN(v)
	return LSN(l), err
}

// String returns the LSN in PostgreSQL's text form, upper-case hex without
// leading zeros, e.g. "16/B374D848"; the zero LSN is "0/0".
func (l LSN) String() string {
	var buf [17]byte
	return string(l.appendText(buf[:0]))
}

func (l LSN) appendText(b []byte) []byte { return probe.AppendLSN(b, uint64(l)) }

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

// Positions the router reads (queryLSN in wire.go, and the wire's
// beginChecked). A write's LSN must be read after its COMMIT and be at or
// past the end of its record: for a synchronous commit the flush LSN is
// the tight choice (already flushed, so replicas will reach it); when the
// commit may have been asynchronous only the insert LSN is safe (the
// flush LSN is usually still below the commit record).
const (
	replaySQL    = "SELECT pg_last_wal_replay_lsn()::text"
	flushLSNSQL  = "SELECT pg_current_wal_flush_lsn()::text"
	insertLSNSQL = "SELECT pg_current_wal_insert_lsn()::text"
)

func lsnSQL(async bool) string {
	if async {
		return insertLSNSQL
	}
	return flushLSNSQL
}

// atomicMax raises a to v if v is higher and reports whether it did.
func atomicMax(a *atomic.Uint64, v uint64) bool {
	for {
		cur := a.Load()
		if v <= cur {
			return false
		}
		if a.CompareAndSwap(cur, v) {
			return true
		}
	}
}
