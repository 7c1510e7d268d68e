package libpqdsn

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// syntaxCase is one DSN and either the parameters it holds or the text
// its error must contain.
type syntaxCase struct {
	dsn    string
	want   []Param
	errHas string
}

func checkSyntax(t *testing.T, cases []syntaxCase) {
	t.Helper()
	for _, tc := range cases {
		p, err := Parse(tc.dsn)
		if tc.errHas != "" {
			var se *Error
			if !errors.As(err, &se) || !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("Parse(%q) error = %v, want an *Error containing %q", tc.dsn, err, tc.errHas)
			}
			continue
		}
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.dsn, err)
			continue
		}
		if !reflect.DeepEqual(p.Params, tc.want) {
			t.Errorf("Parse(%q)\n got  %q\n want %q", tc.dsn, p.Params, tc.want)
		}
	}
}

func TestParseKeyword(t *testing.T) {
	checkSyntax(t, []syntaxCase{
		{dsn: "", want: nil},
		{dsn: "host=h1,h2 port=5432,5433 dbname=shop", want: []Param{{"host", "h1,h2"}, {"port", "5432,5433"}, {"dbname", "shop"}}},
		{dsn: "\thost = h1\n dbname =shop user= app ", want: []Param{{"host", "h1"}, {"dbname", "shop"}, {"user", "app"}}},
		{dsn: `password='a\'b\\c d'`, want: []Param{{"password", `a'b\c d`}}},
		{dsn: "password='it''s'", want: []Param{{"password", "it's"}}},
		{dsn: `password=a\ b\\c'd`, want: []Param{{"password", `a b\c'd`}}},
		{dsn: "user='' application_name=", want: []Param{{"user", ""}, {"application_name", ""}}},
		{dsn: "host='h1'dbname=x", want: []Param{{"host", "h1"}, {"dbname", "x"}}},
		{dsn: "host=h1 host=h2", want: []Param{{"host", "h1"}, {"host", "h2"}}},
		{dsn: "myapp.tenant=7", want: []Param{{"myapp.tenant", "7"}}},
		{dsn: "=x", errHas: "missing keyword before '=' at offset 0"},
		{dsn: "host=h1 dbname", errHas: `missing '=' after "dbname"`},
		{dsn: "host=h1 a'b=c", errHas: `invalid keyword "a'b"`},
		{dsn: "password='x", errHas: `unterminated quoted value of "password"`},
		{dsn: `password='x\`, errHas: "unterminated quoted value"},
		{dsn: `password=x\`, errHas: `value of "password" ends with a backslash`},
		{dsn: "host=h1\x00", errHas: "NUL byte in DSN"},
	})
}

// A word after an unquoted password may be a piece of it: the error
// does not quote it.
func TestParseKeywordHidesWordAfterPassword(t *testing.T) {
	for _, dsn := range []string{"password=s3 cr3t", "sslpassword=s3 cr'3t=x", "password=s3 cr3t more"} {
		_, err := Parse(dsn)
		if err == nil || strings.Contains(err.Error(), "cr3t") || strings.Contains(err.Error(), "cr'3t") {
			t.Errorf("Parse(%q) error = %v, want one that hides the word", dsn, err)
		}
		if err != nil && !strings.Contains(err.Error(), "after the password") {
			t.Errorf("Parse(%q) error = %v, want it to say why", dsn, err)
		}
	}
	// A quoted password ends where its quote does: the next word is shown.
	if _, err := Parse("password='s3' more"); err == nil || !strings.Contains(err.Error(), `"more"`) {
		t.Errorf("after a quoted password: %v", err)
	}
}
