package stmtclass

import (
	"strings"
	"testing"
)

func TestClassCacheAgreesWithClassify(t *testing.T) {
	var cc Cache
	long := "SELECT " + strings.Repeat(`"users"."name", `, 40) + `"users"."id" FROM "users" WHERE "users"."id" = $1`
	write := "WITH d AS (DELETE FROM t RETURNING *) SELECT " + strings.Repeat("d.a, ", 60) + "d.b FROM d"
	for range 3 {
		for _, q := range []string{"SELECT 1", long, write} {
			if got, want := cc.Classify(q), Classify(q); got != want {
				t.Fatalf("cached %q: %+v, want %+v", q[:20], got, want)
			}
		}
	}
	if n := cc.size.Load(); n != 3 {
		t.Errorf("cache holds %d statements, want 3, each once", n)
	}
}

func BenchmarkClassifyCachedLong(b *testing.B) {
	var cc Cache
	long := "SELECT " + strings.Repeat(`"users"."name", `, 120) + `"users"."id" FROM "users" WHERE "users"."id" = $1`
	b.ReportAllocs()
	for b.Loop() {
		cc.Classify(long)
	}
}

// TestClassCacheByAddress: a text is classified as itself wherever it
// lies: the same text at another address, and texts of the same length
// built in one buffer (an entry keeps its text alive, so its address is
// never another text's, and a slot shared by two texts compares them).
func TestClassCacheByAddress(t *testing.T) {
	var cc Cache
	buf := []byte("SELECT v FROM t")
	read := string(buf)
	copy(buf, "DELETE FROM t  ") // the same length
	write := string(buf)
	again := strings.Clone(read)
	for range 2 {
		for _, q := range []string{read, write, again} {
			if got, want := cc.Classify(q), Classify(q); got != want {
				t.Fatalf("cached %q: %+v, want %+v", q, got, want)
			}
		}
	}
	if n := cc.size.Load(); n != 2 {
		t.Errorf("cache holds %d statements, want 2", n)
	}
}
