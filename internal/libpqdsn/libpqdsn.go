// Package libpqdsn holds the syntax of libpq connection strings: the
// keyword/value form and the URL form, their quoting and escaping, lists
// of hosts and ports, and the one rule that keeps passwords out of text
// shown to people. It needs no router and knows nothing of pgreplica's
// own options: the caller interprets the parameters it returns.
package libpqdsn

import (
	"fmt"
	"strings"
)

// Spaces are the characters libpq's isspace skips between parameters.
const Spaces = " \t\n\r\v\f"

func isSpace(b byte) bool { return strings.IndexByte(Spaces, b) >= 0 }

// DefaultPort is libpq's port for a host given without one.
const DefaultPort = 5432

// Error is a syntax error. Its message never quotes a password; the
// caller adds its own prefix.
type Error struct{ msg string }

func (e *Error) Error() string { return e.msg }

func errorf(format string, args ...any) error { return &Error{fmt.Sprintf(format, args...)} }

// Param is one key=value pair, in DSN order (the last occurrence wins).
type Param struct{ Key, Val string }

// DSN is the syntax of a connection string before it is interpreted.
type DSN struct {
	Params []Param
	// URL form only: the hosts and ports of the authority, aligned.
	netHosts, netPorts []string
	// hideHosts: the text after the URL authority contains an '@', so the
	// authority may hold pieces of a password with an unencoded '/' or '?';
	// errors then do not quote host text.
	hideHosts bool
}

// Parse splits s, in either form, into its parameters. Hosts and ports
// are read from them by DSN.Hosts.
func Parse(s string) (DSN, error) {
	s = strings.Trim(s, Spaces)
	if strings.IndexByte(s, 0) >= 0 {
		return DSN{}, errorf("NUL byte in DSN")
	}
	scheme, rest, ok := splitScheme(s)
	if !ok {
		params, err := parseKeyword(s)
		return DSN{Params: params}, err
	}
	switch strings.ToLower(scheme) {
	case "postgres", "postgresql":
		return parseURL(rest)
	}
	return DSN{}, errorf("unsupported URL scheme %q: want postgres:// or postgresql://", scheme)
}

// splitScheme reports whether s starts with "scheme://".
func splitScheme(s string) (scheme, rest string, ok bool) {
	i := strings.Index(s, "://")
	if i <= 0 {
		return "", "", false
	}
	scheme = s[:i]
	for j := 0; j < len(scheme); j++ {
		c := scheme[j]
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !letter && (j == 0 || !(c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return "", "", false
		}
	}
	return scheme, s[i+3:], true
}

// ValidKeyword reports whether k can be a libpq keyword or a PostgreSQL
// run-time parameter name, and so be written unquoted in a DSN.
func ValidKeyword(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}
