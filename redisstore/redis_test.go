package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/redisstore"
	"github.com/redis/go-redis/v9"
)

// redisAddrEnv overrides the address of the test Redis.
const redisAddrEnv = "PGREPLICA_REDIS_ADDR"

// requireEnv set to "require" fails the tests that find no Redis instead
// of skipping them: the integration harness's switch (integration.RequireEnv),
// named here so that this module does not require the harness.
const requireEnv = "PGREPLICA_INTEGRATION"

// needRedis returns a client of the Redis on 127.0.0.1:6379 (or
// $PGREPLICA_REDIS_ADDR) and a key prefix unique to t, whose keys are
// deleted at cleanup. Without a Redis it skips t, or fails it under
// PGREPLICA_INTEGRATION=require.
func needRedis(t *testing.T) (*redis.Client, string) {
	t.Helper()
	addr := os.Getenv(redisAddrEnv)
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		msg := fmt.Sprintf("no Redis at %s (%v); start redis-server or set %s", addr, err, redisAddrEnv)
		if os.Getenv(requireEnv) == "require" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	prefix := fmt.Sprintf("pgreplica-test:%s:%d:", t.Name(), time.Now().UnixNano())
	t.Cleanup(func() {
		defer rdb.Close()
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, prefix+"*", 100).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Errorf("cleaning up %s*: %v", prefix, err)
		}
	})
	return rdb, prefix
}

func get(t *testing.T, s *redisstore.Store, key string) (pgreplica.Token, bool) {
	t.Helper()
	tok, ok, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return tok, ok
}

func put(t *testing.T, s *redisstore.Store, key string, tok pgreplica.Token, ttl time.Duration) {
	t.Helper()
	if err := s.Put(context.Background(), key, tok, ttl); err != nil {
		t.Fatal(err)
	}
}

func TestMaxMerge(t *testing.T) {
	rdb, prefix := needRedis(t)
	s := redisstore.New(rdb, prefix)
	if _, ok := get(t, s, "k"); ok {
		t.Fatal("empty store has k")
	}
	// Positions that a double cannot tell apart (above 2^53), across the
	// 32-bit boundary, and the largest.
	steps := []struct {
		lsn  pgreplica.LSN
		want pgreplica.LSN
	}{
		{0xFFFFFFFF, 0xFFFFFFFF},
		{0x1_00000000, 0x1_00000000},
		{0xFFFFFFFF, 0x1_00000000}, // lower, though it sorts higher as "0/FFFFFFFF" text
		{0x0020_0000_0000_0001, 0x0020_0000_0000_0001},
		{0x0020_0000_0000_0000, 0x0020_0000_0000_0001}, // float64(a) == float64(b)
		{0xFFFFFFFF_FFFFFFFF, 0xFFFFFFFF_FFFFFFFF},
		{0xFFFFFFFF_FFFFFFFE, 0xFFFFFFFF_FFFFFFFF},
	}
	for _, st := range steps {
		put(t, s, "k", pgreplica.Token{LSN: st.lsn, Timeline: 3, SystemID: 77}, time.Minute)
		tok, ok := get(t, s, "k")
		if !ok || tok.LSN != st.want {
			t.Fatalf("after Put(%v): %v %v, want %v", st.lsn, tok.LSN, ok, st.want)
		}
		if tok.Timeline != 3 || tok.SystemID != 77 {
			t.Fatalf("token not kept whole: %+v", tok)
		}
	}
	if float64(0x0020_0000_0000_0001) != float64(0x0020_0000_0000_0000) {
		t.Fatal("the precision case above does not test what it claims")
	}
	// A tie keeps the stored token.
	put(t, s, "k", pgreplica.Token{LSN: 0xFFFFFFFF_FFFFFFFF, Timeline: 9, SystemID: 77}, time.Minute)
	if tok, _ := get(t, s, "k"); tok.Timeline != 3 {
		t.Fatalf("tie replaced the stored token: %+v", tok)
	}
	if n, _ := rdb.Exists(context.Background(), prefix+"k").Result(); n != 1 {
		t.Fatal("key not under the prefix")
	}
}

func TestTTL(t *testing.T) {
	rdb, prefix := needRedis(t)
	s := redisstore.New(rdb, prefix)
	ctx := context.Background()
	pttl := func(key string) time.Duration {
		d, err := rdb.PTTL(ctx, prefix+key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}

	put(t, s, "k", pgreplica.Token{LSN: 10}, time.Minute)
	if d := pttl("k"); d <= 50*time.Second || d > time.Minute {
		t.Fatalf("PTTL %v after a one-minute Put", d)
	}
	// A losing Put still sets the TTL: the user is active.
	put(t, s, "k", pgreplica.Token{LSN: 5}, time.Hour)
	if d := pttl("k"); d <= 59*time.Minute {
		t.Fatalf("PTTL %v after a losing one-hour Put", d)
	}
	if tok, _ := get(t, s, "k"); tok.LSN != 10 {
		t.Fatalf("losing Put changed the token to %v", tok.LSN)
	}
	// ttl 0: a stored token stays without expiry; a losing one keeps
	// the TTL.
	put(t, s, "forever", pgreplica.Token{LSN: 1}, 0)
	if d := pttl("forever"); d != -1 {
		t.Fatalf("PTTL %v for a ttl-0 token, want -1 (none)", d)
	}
	put(t, s, "k", pgreplica.Token{LSN: 1}, 0)
	if d := pttl("k"); d <= 59*time.Minute {
		t.Fatalf("losing ttl-0 Put changed PTTL to %v", d)
	}

	// Redis expires the key.
	put(t, s, "short", pgreplica.Token{LSN: 1}, 20*time.Millisecond)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, ok := get(t, s, "short"); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("key outlived its 20ms TTL by 5s")
		}
		time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
	}

	// A token past its own Expires reads as absent.
	put(t, s, "exp", pgreplica.Token{LSN: 3, Expires: time.Now().Add(-time.Second)}, time.Minute)
	if _, ok := get(t, s, "exp"); ok {
		t.Fatal("expired token returned")
	}
}

func TestCorruptValue(t *testing.T) {
	rdb, prefix := needRedis(t)
	s := redisstore.New(rdb, prefix)
	ctx := context.Background()
	for _, v := range []string{"garbage", "000000000000000Zxx", "0000000000000001" + pgreplica.TokenCodec{}.Encode(pgreplica.Token{LSN: 2})} {
		rdb.Set(ctx, prefix+"bad", v, time.Minute)
		if _, _, err := s.Get(ctx, "bad"); !errors.Is(err, pgreplica.ErrBadToken) {
			t.Errorf("Get of %q: %v, want ErrBadToken", v, err)
		}
	}
	// Put repairs it.
	rdb.Set(ctx, prefix+"bad", "garbage", time.Minute)
	put(t, s, "bad", pgreplica.Token{LSN: 5}, time.Minute)
	if tok, ok := get(t, s, "bad"); !ok || tok.LSN != 5 {
		t.Fatalf("after Put over garbage: %v %v", tok.LSN, ok)
	}
	// A key of another type is an error, not a panic or a silent loss.
	rdb.Del(ctx, prefix+"list")
	rdb.RPush(ctx, prefix+"list", "x")
	if err := s.Put(ctx, "list", pgreplica.Token{LSN: 1}, time.Minute); err == nil {
		t.Fatal("Put over a list succeeded")
	}
}

// TestConcurrentMaxMerge: many goroutines put interleaved LSNs (each
// sequence going up and down, on both sides of 2^32 and above 2^53); after
// each Put the store holds at least that LSN, and at the end exactly the
// highest one put.
func TestConcurrentMaxMerge(t *testing.T) {
	rdb, prefix := needRedis(t)
	s := redisstore.New(rdb, prefix)
	const goroutines, puts = 16, 100
	base := pgreplica.LSN(1) << 54
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			ctx := context.Background()
			for i := range puts {
				n := i*goroutines + g
				if i%2 == 1 {
					n = (puts-i)*goroutines + g
				}
				lsn := base + pgreplica.LSN(n)<<31 + pgreplica.LSN(n) // varies both halves
				if err := s.Put(ctx, "k", pgreplica.Token{LSN: lsn}, time.Minute); err != nil {
					t.Error(err)
					return
				}
				tok, ok, err := s.Get(ctx, "k")
				if err != nil || !ok || tok.LSN < lsn {
					t.Errorf("after Put(%v): %v %v %v", lsn, tok.LSN, ok, err)
					return
				}
			}
		})
	}
	wg.Wait()
	top := pgreplica.LSN(puts*goroutines - 1) // n for i=1, g=goroutines-1
	want := base + top<<31 + top
	if tok, _ := get(t, s, "k"); tok.LSN != want {
		t.Fatalf("final %v, want %v", tok.LSN, want)
	}
}

// TestPerClusterMaxMerge: the stored token keeps one position per
// cluster, each max-merged on its own; past the bound it overflows.
func TestPerClusterMaxMerge(t *testing.T) {
	rdb, prefix := needRedis(t)
	s := redisstore.New(rdb, prefix)
	const a, b = 0xA000000000000001, 0xB
	pos := func(sysid uint64, lsn pgreplica.LSN) pgreplica.Position {
		return pgreplica.Position{SystemID: sysid, Timeline: 1, LSN: lsn}
	}
	tokOf := func(ps ...pgreplica.Position) pgreplica.Token {
		tok := pgreplica.Token{LSN: ps[0].LSN, Timeline: ps[0].Timeline, SystemID: ps[0].SystemID}
		tok.Others = ps[1:]
		return tok
	}
	expect := func(what string, want pgreplica.Token) {
		t.Helper()
		got, ok := get(t, s, "k")
		if !ok || !got.Equal(want) {
			t.Fatalf("%s: %+v %v, want %+v", what, got, ok, want)
		}
	}
	put(t, s, "k", tokOf(pos(a, 0x9_00000000)), time.Minute)
	put(t, s, "k", tokOf(pos(b, 0x100)), time.Minute) // far lower, another cluster
	expect("a, then b", tokOf(pos(a, 0x9_00000000), pos(b, 0x100)))
	put(t, s, "k", tokOf(pos(b, 0x200), pos(a, 0x8_FFFFFFFF), pos(0, 5)), time.Minute)
	expect("both, one lower", tokOf(pos(a, 0x9_00000000), pos(b, 0x200), pos(0, 5)))
	put(t, s, "k", tokOf(pos(a, 0x9_00000001)), time.Minute)
	expect("a raised", tokOf(pos(a, 0x9_00000001), pos(b, 0x200), pos(0, 5)))

	// Up to the bound, then overflow.
	var want []pgreplica.Position
	want = append(want, pos(a, 0x9_00000001), pos(b, 0x200), pos(0, 5))
	for i := range uint64(pgreplica.MaxClusters - 2) {
		p := pos(100+i, pgreplica.LSN(i+1))
		put(t, s, "k", tokOf(p), time.Minute)
		want = append(want, p)
	}
	expect("full", tokOf(want...))
	put(t, s, "k", tokOf(pos(999, 1)), time.Minute)
	over := tokOf(want...)
	over.Overflow = true
	expect("past the bound", over)
	if tok, _ := get(t, s, "k"); tok.LSNFor(999) != ^pgreplica.LSN(0) || tok.LSNFor(a) != 0x9_00000001 {
		t.Fatalf("overflowed token: %+v", tok)
	}

	// Expiry: the later one; none is the latest; a token past its own
	// expiry is replaced, not merged.
	now := time.Now().Truncate(time.Second)
	put(t, s, "e", pgreplica.Token{LSN: 1, SystemID: a, Expires: now.Add(time.Hour)}, time.Minute)
	put(t, s, "e", pgreplica.Token{LSN: 1, SystemID: b, Expires: now.Add(2 * time.Hour)}, time.Minute)
	if tok, _ := get(t, s, "e"); !tok.Expires.Equal(now.Add(2 * time.Hour)) {
		t.Fatalf("expiry %v, want the later one", tok.Expires)
	}
	put(t, s, "e", pgreplica.Token{LSN: 2, SystemID: b}, time.Minute)
	if tok, _ := get(t, s, "e"); !tok.Expires.IsZero() || tok.LSNFor(b) != 2 {
		t.Fatalf("after a token without expiry: %+v", tok)
	}
	rdb.Set(context.Background(), prefix+"x", "P0"+fmt.Sprintf("%016X", now.Add(-time.Second).Unix())+
		fmt.Sprintf("%016X%016X%08X", uint64(a), uint64(0x50), 1), time.Minute)
	put(t, s, "x", pgreplica.Token{LSN: 3, SystemID: b}, time.Minute)
	if tok, ok := get(t, s, "x"); !ok || !tok.Equal(pgreplica.Token{LSN: 3, SystemID: b}) {
		t.Fatalf("Put over an expired token: %+v %v", tok, ok)
	}
}

// TestEarlierReleaseValue: a value of the previous format (one token after
// its LSN) is still read, and a Put merges it as a position of a cluster
// not known, which applies to every cluster.
func TestEarlierReleaseValue(t *testing.T) {
	rdb, prefix := needRedis(t)
	s := redisstore.New(rdb, prefix)
	ctx := context.Background()
	old := pgreplica.Token{LSN: 0x5_00000010, Timeline: 2, SystemID: 42}
	rdb.Set(ctx, prefix+"k", "0000000500000010"+pgreplica.TokenCodec{}.Encode(old), time.Minute)
	if tok, ok := get(t, s, "k"); !ok || !tok.Equal(old) {
		t.Fatalf("Get of an earlier value: %+v %v", tok, ok)
	}
	put(t, s, "k", pgreplica.Token{LSN: 0x100, SystemID: 43}, time.Minute)
	tok, ok := get(t, s, "k")
	if !ok || tok.LSNFor(42) != 0x5_00000010 || tok.LSNFor(43) != 0x5_00000010 || len(tok.Positions()) != 2 {
		t.Fatalf("after a Put over an earlier value: %+v %v", tok, ok)
	}
}

func TestCorruptCurrentValue(t *testing.T) {
	rdb, prefix := needRedis(t)
	s := redisstore.New(rdb, prefix)
	ctx := context.Background()
	p := func(sysid uint64) string { return fmt.Sprintf("%016X%016X%08X", sysid, uint64(1), 1) }
	zeros := "P0" + strings.Repeat("0", 16)
	for _, v := range []string{
		"P", "P0", zeros[:17], zeros + "00", "P2" + zeros[2:], "p" + zeros[1:],
		zeros + strings.ToLower(p(0xABC)), zeros + p(1) + p(1),
		zeros + strings.Repeat(p(0), 1) + p(1) + p(2) + p(3) + p(4) + p(5) + p(6) + p(7) + p(8) + p(9),
		"P0FFFFFFFFFFFFFFFF" + p(1),
	} {
		rdb.Set(ctx, prefix+"bad", v, time.Minute)
		if _, _, err := s.Get(ctx, "bad"); !errors.Is(err, pgreplica.ErrBadToken) {
			t.Errorf("Get of %q: %v, want ErrBadToken", v, err)
		}
		// Put treats what Get cannot read as absent and repairs it.
		put(t, s, "bad", pgreplica.Token{LSN: 7, SystemID: 3}, time.Minute)
		if tok, ok := get(t, s, "bad"); !ok || !tok.Equal(pgreplica.Token{LSN: 7, SystemID: 3}) {
			t.Errorf("Put over %q: %+v %v", v, tok, ok)
		}
	}
}

// TestConcurrentClusters: goroutines writing to different clusters of one
// key at once never lose one another's positions.
func TestConcurrentClusters(t *testing.T) {
	rdb, prefix := needRedis(t)
	s := redisstore.New(rdb, prefix)
	const goroutines, puts = 8, 50
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range puts {
				// Goroutine g writes cluster g+1 and, every other time,
				// a lower position of cluster (g+1)%goroutines+1.
				tok := pgreplica.Token{LSN: pgreplica.LSN(i + 1), SystemID: uint64(g + 1)}
				if i%2 == 1 {
					tok.Others = []pgreplica.Position{{SystemID: uint64((g+1)%goroutines + 1), LSN: 1}}
				}
				if err := s.Put(context.Background(), "k", tok, time.Minute); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	tok, _ := get(t, s, "k")
	if len(tok.Positions()) != goroutines || tok.Overflow {
		t.Fatalf("%+v", tok)
	}
	for g := range uint64(goroutines) {
		if tok.LSNFor(g+1) != puts {
			t.Errorf("cluster %d at %v, want %v", g+1, tok.LSNFor(g+1), pgreplica.LSN(puts))
		}
	}
}

func TestPrefixes(t *testing.T) {
	rdb, prefix := needRedis(t)
	a := redisstore.New(rdb, prefix+"a:")
	b := redisstore.New(rdb, prefix+"b:")
	put(t, a, "u", pgreplica.Token{LSN: 1}, time.Minute)
	if _, ok := get(t, b, "u"); ok {
		t.Fatal("prefixes share keys")
	}
	if n, _ := rdb.Exists(context.Background(), prefix+"a:u").Result(); n != 1 {
		t.Fatal("key not at prefix+key")
	}
	if redisstore.New(rdb, "") == nil || redisstore.DefaultPrefix == "" {
		t.Fatal("default prefix")
	}
}

// BenchmarkPutGet measures one max-merging Put (EVALSHA) and one Get
// against the local Redis.
func BenchmarkPutGet(b *testing.B) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		b.Skip(err)
	}
	prefix := fmt.Sprintf("pgreplica-bench:%d:", time.Now().UnixNano())
	defer rdb.Del(context.Background(), prefix+"k")
	s := redisstore.New(rdb, prefix)
	ctx := context.Background()
	var lsn pgreplica.LSN
	for b.Loop() {
		lsn++
		if err := s.Put(ctx, "k", pgreplica.Token{LSN: lsn}, time.Minute); err != nil {
			b.Fatal(err)
		}
		if _, _, err := s.Get(ctx, "k"); err != nil {
			b.Fatal(err)
		}
	}
}
