package pgreplica

import (
	"strings"
	"testing"
)

func TestClassCacheAgreesWithClassify(t *testing.T) {
	var cc classCache
	long := "SELECT " + strings.Repeat(`"users"."name", `, 40) + `"users"."id" FROM "users" WHERE "users"."id" = $1`
	write := "WITH d AS (DELETE FROM t RETURNING *) SELECT " + strings.Repeat("d.a, ", 60) + "d.b FROM d"
	for range 3 {
		for _, q := range []string{"SELECT 1", long, write} {
			if got, want := cc.classify(q), classify(q); got != want {
				t.Fatalf("cached %q: %+v, want %+v", q[:20], got, want)
			}
		}
	}
	if n := cc.size.Load(); n != 3 {
		t.Errorf("cache holds %d statements, want 3, each once", n)
	}
}

func BenchmarkClassifyCachedLong(b *testing.B) {
	var cc classCache
	long := "SELECT " + strings.Repeat(`"users"."name", `, 120) + `"users"."id" FROM "users" WHERE "users"."id" = $1`
	b.ReportAllocs()
	for b.Loop() {
		cc.classify(long)
	}
}
