package pgxflight

import (
	"bytes"
	"database/sql/driver"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// The formats stdlib asks for: binary where database/sql cannot tell the
// binary form from the text form, text for the rest.
func TestResultFormat(t *testing.T) {
	for oid, want := range map[uint32]int16{
		pgtype.Int8OID: pgtype.BinaryFormatCode, pgtype.BoolOID: pgtype.BinaryFormatCode,
		pgtype.TimestamptzOID: pgtype.BinaryFormatCode, pgtype.ByteaOID: pgtype.BinaryFormatCode,
		pgtype.NumericOID: pgtype.TextFormatCode, pgtype.IntervalOID: pgtype.TextFormatCode,
		pgtype.TextOID: pgtype.TextFormatCode, pgtype.JSONBOID: pgtype.TextFormatCode,
	} {
		if got := ResultFormat(oid); got != want {
			t.Errorf("ResultFormat(%d) = %d, want %d", oid, got, want)
		}
	}
}

// A value encoded as the server sends it comes out as stdlib's
// database/sql value for its type.
func TestSQLValueOf(t *testing.T) {
	m := pgtype.NewMap()
	ts := time.Date(2024, 3, 1, 12, 30, 0, 0, time.UTC)
	for _, tc := range []struct {
		oid  uint32
		in   any
		want driver.Value
	}{
		{pgtype.Int2OID, int16(-7), int64(-7)},
		{pgtype.Int4OID, int32(42), int64(42)},
		{pgtype.Int8OID, int64(1) << 40, int64(1) << 40},
		{pgtype.Float4OID, float32(1.5), float64(1.5)},
		{pgtype.Float8OID, 2.25, 2.25},
		{pgtype.BoolOID, true, true},
		{pgtype.TextOID, "hé", "hé"},
		{pgtype.NumericOID, "12.50", "12.50"},
		{pgtype.ByteaOID, []byte{0, 1, 2}, []byte{0, 1, 2}},
		{pgtype.OIDOID, uint32(16384), int64(16384)},
		{pgtype.TimestamptzOID, ts, ts},
	} {
		format := ResultFormat(tc.oid)
		raw, err := m.Encode(tc.oid, format, tc.in, nil)
		if err != nil {
			t.Fatalf("encode %v as %d: %v", tc.in, tc.oid, err)
		}
		got, err := sqlValueOf(m, tc.oid, format)(raw)
		if err != nil {
			t.Errorf("oid %d: %v", tc.oid, err)
			continue
		}
		if !equalValue(got, tc.want) {
			t.Errorf("oid %d: got %#v, want %#v", tc.oid, got, tc.want)
		}
	}
}

func equalValue(a, b driver.Value) bool {
	switch x := a.(type) {
	case []byte:
		y, ok := b.([]byte)
		return ok && bytes.Equal(x, y)
	case time.Time:
		y, ok := b.(time.Time)
		return ok && x.Equal(y)
	}
	return a == b
}

// Descriptions keep at most MaxDescriptions, and forget one on demand.
func TestDescriptionsBound(t *testing.T) {
	var d Descriptions
	for i := range MaxDescriptions + 10 {
		d.keep(string(rune('a'+i%26))+time.Duration(i).String(), &pgconn.StatementDescription{})
	}
	if len(d.m) != MaxDescriptions {
		t.Errorf("%d descriptions kept, want %d", len(d.m), MaxDescriptions)
	}
	d.keep("q", &pgconn.StatementDescription{})
	d.forget("q")
	if d.m["q"] != nil {
		t.Error("forget kept the description")
	}
}
