package libpqdsn

import (
	"errors"
	"strings"
	"testing"
)

// fuzzPassword is put before the fuzzed text; no error may contain it.
const fuzzPassword = "s3cr3t"

// passwordPrefixes put fuzzPassword in each position a password can take.
var passwordPrefixes = []string{
	"password=" + fuzzPassword + " ",
	"password='" + fuzzPassword + "' ",
	"postgres://u:" + fuzzPassword + "@",
	"postgres://h/db?password=" + fuzzPassword + "&",
}

// hostsOf parses dsn and reads its hosts, as a caller does.
func hostsOf(dsn string) ([]HostPort, error) {
	p, err := Parse(dsn)
	if err != nil {
		return nil, err
	}
	return p.Hosts()
}

// FuzzParse: Parse and Hosts never panic and fail only with an *Error;
// every parameter Parse accepts is read back exactly from WriteParam's
// output; and no error shows a password put before the text, in any
// position a password can take.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"host=h1,h2 port=5432,5433 dbname=shop user=app password='it''s' sslmode=disable",
		`host=h1 password=a\ b\\c'd`, "host='h1, h2' port=' 1, 2'", "host=h1 password=s3 cr3t",
		"postgres://app:pw@db1:5432,db2:5433,[::1]:5434/shop?sslmode=disable",
		"postgres://%2Fvar%2Frun%2Fpostgresql/db", "postgres:///db?host=/tmp&port=1",
		"postgres://u:s3c/r3t@h1/db", "postgres://[fe80::1%25eth0]/db", "postgres://%2000",
	} {
		f.Add(s)
	}
	for _, v := range trickyValues {
		var b strings.Builder
		WriteParam(&b, "password", v, false)
		f.Add(b.String())
	}
	f.Fuzz(func(t *testing.T, dsn string) {
		p, err := Parse(dsn)
		if err == nil {
			_, err = p.Hosts()
			var b strings.Builder
			for _, kv := range p.Params {
				WriteParam(&b, kv.Key, kv.Val, false)
			}
			checkReadsBack(t, b.String(), p.Params)
		}
		var se *Error
		if err != nil && !errors.As(err, &se) {
			t.Fatalf("untyped error %v", err)
		}
		if strings.Contains(dsn, fuzzPassword) {
			return
		}
		for _, pre := range passwordPrefixes {
			if _, err := hostsOf(pre + dsn); err != nil && strings.Contains(err.Error(), fuzzPassword) {
				t.Fatalf("%q: error shows the password: %v", pre+dsn, err)
			}
		}
	})
}
