package clitext

import (
	"flag"
	"testing"
	"time"
)

func TestParseFlagsAfterPositional(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	j := fs.Bool("json", false, "")
	d := fs.Duration("sample", 0, "")
	pos, err := ParseFlags(fs, []string{"-sample", "2s", "dsn", "-json"})
	if err != nil || len(pos) != 1 || pos[0] != "dsn" || !*j || *d != 2*time.Second {
		t.Fatalf("ParseFlags = %q, %v; json %v sample %v", pos, err, *j, *d)
	}
}
