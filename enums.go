package pgreplica

import "fmt"

// The enumerations of Config print as the names the DSN takes and parse
// back from them (encoding.TextMarshaler and TextUnmarshaler, so they work
// with flag.TextVar, JSON and YAML configuration as well).

func (c Consistency) String() string { return enumString(consistencyNames, c) }

// MarshalText returns the DSN's name for c.
func (c Consistency) MarshalText() ([]byte, error) { return enumText(consistencyNames, c) }

// UnmarshalText parses a name the DSN option pgreplica_default takes.
func (c *Consistency) UnmarshalText(b []byte) error {
	return enumParse(c, consistencyNames, "consistency", b)
}

// String returns "default" for FallbackDefault and the DSN's name for the
// others.
func (f Fallback) String() string { return enumString(fallbackTextNames, f) }

// MarshalText returns the DSN's name for f ("default" for FallbackDefault).
func (f Fallback) MarshalText() ([]byte, error) { return enumText(fallbackTextNames, f) }

// UnmarshalText parses a name the DSN option pgreplica_fallback takes, or
// "default".
func (f *Fallback) UnmarshalText(b []byte) error {
	return enumParse(f, fallbackTextNames, "fallback", b)
}

func (p Policy) String() string { return enumString(policyNames, p) }

// MarshalText returns the DSN's name for p.
func (p Policy) MarshalText() ([]byte, error) { return enumText(policyNames, p) }

// UnmarshalText parses a name the DSN option pgreplica_policy takes.
func (p *Policy) UnmarshalText(b []byte) error { return enumParse(p, policyNames, "policy", b) }

func (r ReadAfterWrite) String() string { return enumString(readAfterWriteNames, r) }

// MarshalText returns the DSN's name for r.
func (r ReadAfterWrite) MarshalText() ([]byte, error) { return enumText(readAfterWriteNames, r) }

// UnmarshalText parses a name the DSN option pgreplica_read_after_write
// takes.
func (r *ReadAfterWrite) UnmarshalText(b []byte) error {
	return enumParse(r, readAfterWriteNames, "read-after-write choice", b)
}

// fallbackTextNames adds FallbackDefault, which Config and contexts take
// but the DSN does not.
var fallbackTextNames = append([]dsnEnumName[Fallback]{{"default", FallbackDefault}}, fallbackNames...)

func enumString[T ~int](names []dsnEnumName[T], v T) string {
	for _, n := range names {
		if n.v == v {
			return n.name
		}
	}
	return fmt.Sprintf("%T(%d)", v, v) // %d: %v would call String again
}

func enumText[T ~int](names []dsnEnumName[T], v T) ([]byte, error) {
	for _, n := range names {
		if n.v == v {
			return []byte(n.name), nil
		}
	}
	return nil, fmt.Errorf("%w: no name for %T(%d)", ErrBadConfig, v, v)
}

func enumParse[T ~int](p *T, names []dsnEnumName[T], what string, b []byte) error {
	if err := dsnEnum(p, names).Set(string(b)); err != nil {
		return fmt.Errorf("%w: %s %q: %w", ErrBadConfig, what, b, err)
	}
	return nil
}
