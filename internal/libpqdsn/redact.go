package libpqdsn

import "strings"

// Masked replaces passwords in redacted output.
const Masked = "xxxxx"

// Redact masks password in msg, for messages of our own and of inner
// drivers that may quote a DSN. Very short passwords are left alone, as
// masking them would garble the message.
func Redact(msg, password string) string {
	if len(password) < 4 {
		return msg
	}
	return strings.ReplaceAll(msg, password, Masked)
}

// IsSecret reports whether a parameter's value must never be shown: any
// whose name contains "password" (password, sslpassword, ...).
func IsSecret(key string) bool { return strings.Contains(strings.ToLower(key), "password") }
