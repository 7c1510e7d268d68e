package libpqdsn

import (
	"fmt"
	"strings"
)

// percentDecode decodes %XX escapes only ('+' stays '+', as in libpq) and
// refuses %00.
func percentDecode(s string) (string, error) {
	if strings.IndexByte(s, '%') < 0 {
		return s, nil
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b = append(b, s[i])
			continue
		}
		if i+2 >= len(s) || unhex(s[i+1]) < 0 || unhex(s[i+2]) < 0 {
			return "", fmt.Errorf("invalid percent-encoding")
		}
		c := byte(unhex(s[i+1])<<4 | unhex(s[i+2]))
		if c == 0 {
			return "", fmt.Errorf("%%00 (NUL) is not allowed")
		}
		b = append(b, c)
		i += 2
	}
	return string(b), nil
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
