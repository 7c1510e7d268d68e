package libpqdsn

import (
	"strings"
	"testing"
)

// trickyValues exercise quoting.
var trickyValues = []string{
	"", "plain", "with space", `it's`, `back\slash`, `'`, `\`, `\'`, `''`, `a b'c\d e`, " lead and trail ",
	"tab\there", "new\nline", "=eq=", "ünïcödé", "%41", "pass,word", "x' host='evil",
}

func TestWriteParam(t *testing.T) {
	var b strings.Builder
	WriteParam(&b, "host", "db1", true)
	WriteParam(&b, "password", `it's \ ok`, true)
	WriteParam(&b, "dbname", "shop", false)
	WriteParam(&b, "application_name", "my app", false)
	WriteParam(&b, "options", "", false)
	want := `host='db1' password='it\'s \\ ok' dbname=shop application_name='my app' options=''`
	if got := b.String(); got != want {
		t.Errorf("WriteParam\n got  %s\n want %s", got, want)
	}
}

// Whatever WriteParam writes, quoted or not, Parse reads back exactly.
func TestWriteParamReadsBack(t *testing.T) {
	for _, v := range trickyValues {
		for _, always := range []bool{true, false} {
			var b strings.Builder
			WriteParam(&b, "host", "h", always)
			WriteParam(&b, "password", v, always)
			WriteParam(&b, "application_name", v, always)
			checkReadsBack(t, b.String(), []Param{{"host", "h"}, {"password", v}, {"application_name", v}})
		}
	}
}

func checkReadsBack(t *testing.T, dsn string, want []Param) {
	t.Helper()
	p, err := Parse(dsn)
	if err != nil {
		t.Fatalf("Parse(%q): %v", dsn, err)
	}
	if len(p.Params) != len(want) {
		t.Fatalf("Parse(%q) = %q, want %q", dsn, p.Params, want)
	}
	for i := range want {
		if p.Params[i] != want[i] {
			t.Fatalf("Parse(%q) = %q, want %q", dsn, p.Params, want)
		}
	}
}
