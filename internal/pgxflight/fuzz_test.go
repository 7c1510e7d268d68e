package pgxflight

import (
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
)

// fuzzOIDs are the types Rows converts specially, and one it reads as
// text.
var fuzzOIDs = []uint32{
	pgtype.BoolOID, pgtype.ByteaOID, pgtype.CIDOID, pgtype.DateOID, pgtype.Float4OID, pgtype.Float8OID,
	pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID, pgtype.OIDOID, pgtype.TimestampOID, pgtype.TimestamptzOID,
	pgtype.XIDOID, pgtype.JSONBOID, pgtype.NumericOID, pgtype.TextOID,
}

// A value a server (or anything in its place) sends never panics the
// conversion: it converts, or fails with an error.
func FuzzSQLValueOf(f *testing.F) {
	f.Add(uint8(0), false, []byte{1})
	f.Add(uint8(8), true, []byte("42"))
	f.Add(uint8(11), false, []byte{0, 0, 0, 0, 0, 0, 0, 1})
	f.Add(uint8(3), true, []byte("2024-03-01"))
	m := pgtype.NewMap()
	f.Fuzz(func(t *testing.T, which uint8, text bool, raw []byte) {
		oid := fuzzOIDs[int(which)%len(fuzzOIDs)]
		format := ResultFormat(oid)
		if text {
			format = pgtype.TextFormatCode
		}
		v, err := sqlValueOf(m, oid, format)(raw)
		if err != nil && v != nil {
			t.Errorf("oid %d: a value %#v with the error %v", oid, v, err)
		}
	})
}
