package libpqdsn

import (
	"strconv"
	"strings"
)

// parseKeyword splits a keyword/value DSN into its parameters, following
// libpq's conninfo_parse.
func parseKeyword(s string) ([]Param, error) {
	var (
		out []Param
		i   int
		// afterSecret: the previous value was an unquoted secret, so a
		// malformed token that follows may be a piece of it.
		afterSecret bool
	)
	skip := func() {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
	}
	show := func(k string) string {
		if afterSecret {
			return "the word after the password (quote a password containing spaces)"
		}
		return strconv.Quote(k)
	}
	for {
		skip()
		if i == len(s) {
			return out, nil
		}
		start := i
		for i < len(s) && !isSpace(s[i]) && s[i] != '=' {
			i++
		}
		key := s[start:i]
		skip()
		if key == "" {
			return nil, errorf("missing keyword before '=' at offset %d", i)
		}
		if i == len(s) || s[i] != '=' {
			return nil, errorf("missing '=' after %s", show(key))
		}
		if !ValidKeyword(key) {
			return nil, errorf("invalid keyword %s: want letters, digits, '_' and '.'", show(key))
		}
		i++ // '='
		skip()
		var (
			b      strings.Builder
			quoted bool
		)
		if i < len(s) && s[i] == '\'' {
			quoted = true
			i++
			for {
				if i == len(s) {
					return nil, errorf("unterminated quoted value of %q", key)
				}
				c := s[i]
				if c == '\\' {
					i++
					if i == len(s) {
						return nil, errorf("unterminated quoted value of %q", key)
					}
					b.WriteByte(s[i])
					i++
					continue
				}
				if c == '\'' {
					if i+1 < len(s) && s[i+1] == '\'' { // '' stands for '
						b.WriteByte('\'')
						i += 2
						continue
					}
					i++
					break
				}
				b.WriteByte(c)
				i++
			}
		} else {
			for i < len(s) && !isSpace(s[i]) {
				if s[i] == '\\' {
					i++
					if i == len(s) {
						return nil, errorf("value of %q ends with a backslash", key)
					}
				}
				b.WriteByte(s[i])
				i++
			}
		}
		out = append(out, Param{key, b.String()})
		afterSecret = IsSecret(key) && !quoted
	}
}
