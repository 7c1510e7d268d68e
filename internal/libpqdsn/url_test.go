package libpqdsn

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseURL(t *testing.T) {
	checkSyntax(t, []syntaxCase{
		{dsn: "postgres://app:pw@db1/shop", want: []Param{{"user", "app"}, {"password", "pw"}, {"dbname", "shop"}}},
		{dsn: "PostgreSQL://h1:6000", want: nil},
		{dsn: "  postgresql://h1/db \n", want: []Param{{"dbname", "db"}}},
		{dsn: "postgres://us%40er:p%2Fw%3Fd%25%20x@h1/my%20db?application_name=a%26b",
			want: []Param{{"user", "us@er"}, {"password", "p/w?d% x"}, {"dbname", "my db"}, {"application_name", "a&b"}}},
		{dsn: "postgres://u:a+b@h1/db?application_name=x+y", want: []Param{{"user", "u"}, {"password", "a+b"}, {"dbname", "db"}, {"application_name", "x+y"}}},
		{dsn: "postgres://u:p@ss@h1/db", want: []Param{{"user", "u"}, {"password", "p@ss"}, {"dbname", "db"}}},
		{dsn: "postgres://app@h1/", want: []Param{{"user", "app"}}},
		{dsn: "postgres://h1/db?&sslmode=require&&", want: []Param{{"dbname", "db"}, {"sslmode", "require"}}},
		{dsn: "postgres:///db?host=/tmp&port=5433", want: []Param{{"dbname", "db"}, {"host", "/tmp"}, {"port", "5433"}}},
		{dsn: "mysql://u:s3cr3t@h/db", errHas: `unsupported URL scheme "mysql"`},
		{dsn: "postgres://[", errHas: "missing ']' after IPv6 address"},
		{dsn: "postgres://[::1]x/db", errHas: "unexpected text after ']'"},
		{dsn: "postgres://[db1]/db", errHas: "brackets must hold an IPv6 address"},
		{dsn: "postgres://::1:5432/db", errHas: "must be written in brackets"},
		{dsn: "postgres://h1/db?sslmode", errHas: "query parameter 2 has no '='"},
		{dsn: "postgres://h1/d%zzb", errHas: "database name: invalid percent-encoding"},
		{dsn: "postgres://h1/d%00b", errHas: "%00 (NUL) is not allowed"},
		{dsn: "postgres://u%zz@h1/db", errHas: "user name: invalid percent-encoding"},
		{dsn: "postgres://u:s3cr3t%zz@h1/db", errHas: "password: invalid percent-encoding"},
		{dsn: "postgres://h1/db?a%20b=1", errHas: "invalid query parameter name"},
		{dsn: "postgres://h1/db?x=%2", errHas: `value of "x": invalid percent-encoding`},
	})
}

// The authority's hosts and ports are decoded and aligned; Hosts reads them.
func TestParseURLHosts(t *testing.T) {
	for dsn, want := range map[string][]HostPort{
		"postgres://[::1]:5433,[fe80::1%25eth0],[2001:db8::2]:6000/db": {{"::1", 5433}, {"fe80::1%eth0", 5432}, {"2001:db8::2", 6000}},
		"postgres://%2Fvar%2Frun%2Fpostgresql/db":                      {{"/var/run/postgresql", 5432}},
		"postgres://%20h1%20:7/db":                                     {{"h1", 7}},
	} {
		got, err := hostsOf(dsn)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("Hosts of %q = %v, %v; want %v", dsn, got, err, want)
		}
	}
}

// When text after the authority holds an '@', the authority may hold a
// piece of a password with an unencoded '/' or '?': its errors show none
// of it.
func TestParseURLHidesAuthority(t *testing.T) {
	for _, dsn := range []string{
		"postgres://u:s3c/r3t@h1/db",
		"postgres://u:s3c?r3t@h1/db",
		"postgres://u:s3c:x/r3t@h1/db",
		"postgres://u:s3c,[/r3t@h1/db",
		"postgres://u:s3c,,/r3t@h1/db",
	} {
		if _, err := hostsOf(dsn); err == nil || strings.Contains(err.Error(), "s3c") {
			t.Errorf("%q: error %v, want one that hides the authority", dsn, err)
		}
	}
}
