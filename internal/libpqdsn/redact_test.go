package libpqdsn

import "testing"

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ msg, pw, want string }{
		{"password=s3cr3t host=h", "s3cr3t", "password=xxxxx host=h"},
		{"s3cr3t and s3cr3t", "s3cr3t", "xxxxx and xxxxx"},
		{"nothing to hide", "s3cr3t", "nothing to hide"},
		// Too short to mask without garbling the message.
		{"host=h password=pw", "pw", "host=h password=pw"},
		{"host=h", "", "host=h"},
	} {
		if got := Redact(tc.msg, tc.pw); got != tc.want {
			t.Errorf("Redact(%q, %q) = %q, want %q", tc.msg, tc.pw, got, tc.want)
		}
	}
}

func TestIsSecret(t *testing.T) {
	for k, want := range map[string]bool{"password": true, "sslpassword": true, "PassWord": true, "passfile": false, "user": false} {
		if got := IsSecret(k); got != want {
			t.Errorf("IsSecret(%q) = %v, want %v", k, got, want)
		}
	}
}
