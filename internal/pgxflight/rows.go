package pgxflight

import (
	"database/sql/driver"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Rows are database/sql rows over pgx rows read in a flight: the values
// and column types are those pgx's stdlib gives for the same answer, so a
// caller cannot tell which path served its read. The answer's formats are
// those stdlib asks for (ResultFormat).
type Rows struct {
	rows pgx.Rows
	m    *pgtype.Map
	// conv converts each column's raw value, made on first use.
	conv  []func([]byte) (driver.Value, error)
	names []string
	// peeked: rows stand on a first row Next has not handed out yet
	// (read up front, as stdlib does, so that an error before any row
	// reaches the router, which can send the read elsewhere).
	peeked, more bool
	// done runs once the rows closed (the flight's end).
	done func() error
}

var (
	_ driver.RowsColumnTypeDatabaseTypeName = (*Rows)(nil)
	_ driver.RowsColumnTypeLength           = (*Rows)(nil)
	_ driver.RowsColumnTypePrecisionScale   = (*Rows)(nil)
	_ driver.RowsColumnTypeScanType         = (*Rows)(nil)
)

// ResultFormat is the result format pgx's stdlib asks for a column of
// type oid: binary only for the types whose binary form database/sql
// values cannot tell apart from their text form, text for the others (a
// numeric or an interval reads as the server writes it).
func ResultFormat(oid uint32) int16 {
	switch oid {
	case pgtype.BoolOID, pgtype.ByteaOID, pgtype.CIDOID, pgtype.DateOID, pgtype.Float4OID, pgtype.Float8OID,
		pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID, pgtype.OIDOID, pgtype.TimestampOID, pgtype.TimestamptzOID,
		pgtype.XIDOID:
		return pgtype.BinaryFormatCode
	}
	return pgtype.TextFormatCode
}

func (r *Rows) Columns() []string {
	if r.names == nil {
		fds := r.rows.FieldDescriptions()
		r.names = make([]string, len(fds))
		for i := range fds {
			r.names[i] = fds[i].Name
		}
	}
	return r.names
}

func (r *Rows) Next(dest []driver.Value) error {
	more := r.more
	if r.peeked {
		r.peeked = false
	} else {
		more = r.rows.Next()
	}
	if !more {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return io.EOF
	}
	if r.conv == nil {
		fds := r.rows.FieldDescriptions()
		r.conv = make([]func([]byte) (driver.Value, error), len(fds))
		for i := range fds {
			r.conv[i] = sqlValueOf(r.m, fds[i].DataTypeOID, fds[i].Format)
		}
	}
	for i, raw := range r.rows.RawValues() {
		if raw == nil {
			dest[i] = nil
			continue
		}
		v, err := r.conv[i](raw)
		if err != nil {
			return fmt.Errorf("convert field %d failed: %w", i, err)
		}
		dest[i] = v
	}
	return nil
}

func (r *Rows) Close() error {
	r.rows.Close()
	err := r.rows.Err()
	if r.done != nil {
		if e := r.done(); err == nil {
			err = e
		}
		r.done = nil
	}
	return err
}

// sqlValueOf returns the conversion of a raw value of type oid in format
// into the database/sql value stdlib gives: Go's integers, floats, bools,
// times and bytes for the types that have them, and the text of the
// others.
func sqlValueOf(m *pgtype.Map, oid uint32, format int16) func([]byte) (driver.Value, error) {
	switch oid {
	case pgtype.BoolOID:
		return scanAs[bool](m, oid, format, func(v bool) (driver.Value, error) { return v, nil })
	case pgtype.ByteaOID, pgtype.JSONOID, pgtype.JSONBOID, pgtype.XMLOID:
		return scanAs[[]byte](m, oid, format, func(v []byte) (driver.Value, error) { return v, nil })
	case pgtype.CIDOID, pgtype.OIDOID, pgtype.XIDOID:
		return scanAs[pgtype.Uint32](m, oid, format, pgtype.Uint32.Value)
	case pgtype.DateOID:
		return scanAs[pgtype.Date](m, oid, format, pgtype.Date.Value)
	case pgtype.Float4OID:
		return scanAs[float32](m, oid, format, func(v float32) (driver.Value, error) { return float64(v), nil })
	case pgtype.Float8OID:
		return scanAs[float64](m, oid, format, func(v float64) (driver.Value, error) { return v, nil })
	case pgtype.Int2OID:
		return scanAs[int16](m, oid, format, func(v int16) (driver.Value, error) { return int64(v), nil })
	case pgtype.Int4OID:
		return scanAs[int32](m, oid, format, func(v int32) (driver.Value, error) { return int64(v), nil })
	case pgtype.Int8OID:
		return scanAs[int64](m, oid, format, func(v int64) (driver.Value, error) { return v, nil })
	case pgtype.TimestampOID:
		return scanAs[pgtype.Timestamp](m, oid, format, pgtype.Timestamp.Value)
	case pgtype.TimestamptzOID:
		return scanAs[pgtype.Timestamptz](m, oid, format, pgtype.Timestamptz.Value)
	}
	return scanAs[string](m, oid, format, func(v string) (driver.Value, error) { return v, nil })
}

// scanAs plans the scan of a value of type oid into a T once, and returns
// the function that scans each raw value and turns the T into a
// database/sql value.
func scanAs[T any](m *pgtype.Map, oid uint32, format int16, value func(T) (driver.Value, error)) func([]byte) (driver.Value, error) {
	var dst T
	plan := m.PlanScan(oid, format, &dst)
	return func(raw []byte) (driver.Value, error) {
		if err := plan.Scan(raw, &dst); err != nil {
			return nil, err
		}
		return value(dst)
	}
}

// ColumnTypeDatabaseTypeName is the type's name in upper case, or its OID
// when the connection does not know it.
func (r *Rows) ColumnTypeDatabaseTypeName(i int) string {
	oid := r.rows.FieldDescriptions()[i].DataTypeOID
	if t, ok := r.m.TypeForOID(oid); ok {
		return strings.ToUpper(t.Name)
	}
	return strconv.FormatInt(int64(oid), 10)
}

// typmodHeader is the varlena header PostgreSQL counts in a type modifier.
const typmodHeader = 4

func (r *Rows) ColumnTypeLength(i int) (int64, bool) {
	fd := r.rows.FieldDescriptions()[i]
	switch fd.DataTypeOID {
	case pgtype.TextOID, pgtype.ByteaOID:
		return math.MaxInt64, true
	case pgtype.VarcharOID, pgtype.BPCharOID:
		return int64(fd.TypeModifier - typmodHeader), true
	case pgtype.VarbitOID:
		return int64(fd.TypeModifier), true
	}
	return 0, false
}

func (r *Rows) ColumnTypePrecisionScale(i int) (precision, scale int64, ok bool) {
	fd := r.rows.FieldDescriptions()[i]
	if fd.DataTypeOID != pgtype.NumericOID {
		return 0, 0, false
	}
	mod := fd.TypeModifier - typmodHeader
	return int64(mod>>16) & 0xffff, int64(mod) & 0xffff, true
}

func (r *Rows) ColumnTypeScanType(i int) reflect.Type {
	switch r.rows.FieldDescriptions()[i].DataTypeOID {
	case pgtype.Float8OID, pgtype.NumericOID:
		return reflect.TypeFor[float64]()
	case pgtype.Float4OID:
		return reflect.TypeFor[float32]()
	case pgtype.Int8OID:
		return reflect.TypeFor[int64]()
	case pgtype.Int4OID:
		return reflect.TypeFor[int32]()
	case pgtype.Int2OID:
		return reflect.TypeFor[int16]()
	case pgtype.BoolOID:
		return reflect.TypeFor[bool]()
	case pgtype.DateOID, pgtype.TimestampOID, pgtype.TimestamptzOID:
		return reflect.TypeFor[time.Time]()
	case pgtype.ByteaOID:
		return reflect.TypeFor[[]byte]()
	}
	return reflect.TypeFor[string]()
}
