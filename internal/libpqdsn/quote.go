package libpqdsn

import "strings"

// WriteParam appends key=value in the keyword/value form, after a space
// unless b is empty. The value is single-quoted, with ' and \ escaped, when
// always is set or when it could not be read back without quotes: both
// inner drivers (pgx, lib/pq) and Parse read a quoted value back verbatim.
func WriteParam(b *strings.Builder, k, v string, always bool) {
	if b.Len() > 0 {
		b.WriteByte(' ')
	}
	b.WriteString(k)
	b.WriteByte('=')
	if !always && v != "" && !strings.ContainsAny(v, "'\\"+Spaces) {
		b.WriteString(v)
		return
	}
	b.WriteByte('\'')
	for i := 0; i < len(v); i++ {
		if v[i] == '\'' || v[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(v[i])
	}
	b.WriteByte('\'')
}
