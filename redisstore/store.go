// Package redisstore is a pgreplicahttp.TokenStore in Redis, for tokens
// shared by the tabs, devices and application instances of one user: every
// instance that talks to the same Redis sees the highest token any of them
// stored.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
//	mw := pgreplicahttp.Middleware(pgreplicahttp.Options{
//		Store:    redisstore.New(rdb, ""),
//		StoreKey: func(r *http.Request) (string, bool) { return userID(r) },
//	})
//
// # Storage
//
// Each key holds a Redis string: the token's LSN as 16 upper-case
// hexadecimal digits, then the token's text form (unsigned; Redis is
// trusted storage). Put max-merges atomically with a small Lua script run
// with EVALSHA: it replaces the value only when the new LSN is higher and
// sets the key's time to live with PEXPIRE. LSNs are 64-bit and Lua
// numbers are doubles, exact only up to 2^53, so the script compares the
// upper and lower 32-bit halves as two numbers (each parsed from 8 hex
// digits, exactly) rather than the whole LSN. Every key is a single Redis
// key, so the store works with Redis Cluster too.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/redis/go-redis/v9"
)

// DefaultPrefix is prepended to every key when New is given "".
const DefaultPrefix = "pgreplica:token:"

// Client is the part of a go-redis client the store uses; *redis.Client,
// *redis.ClusterClient, *redis.Ring and redis.UniversalClient have it.
type Client interface {
	redis.Scripter
	Get(ctx context.Context, key string) *redis.StringCmd
}

// Store is a pgreplicahttp.TokenStore in Redis. It is safe for concurrent
// use, across goroutines and processes.
type Store struct {
	client Client
	prefix string
	merge  *redis.Script
}

// New returns a store that keeps its entries in client under prefix+key;
// an empty prefix means DefaultPrefix. The store does not own client:
// close it yourself.
func New(client Client, prefix string) *Store {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return &Store{client: client, prefix: prefix, merge: redis.NewScript(maxMergeScript)}
}

// maxMergeScript sets KEYS[1] to ARGV[1] unless the stored value's LSN is
// at least as high, then gives the key a TTL of ARGV[2] milliseconds (0:
// none for a value it wrote; a stored value that stays keeps its TTL). It
// returns 1 when it wrote.
const maxMergeScript = `
local function lsn(v)
  if not v or #v < 16 then return nil end
  local hi = tonumber(string.sub(v, 1, 8), 16)
  local lo = tonumber(string.sub(v, 9, 16), 16)
  if not hi or not lo then return nil end
  return hi, lo
end
local won = true
local cur = redis.call('GET', KEYS[1])
if cur then
  local chi, clo = lsn(cur)
  local nhi, nlo = lsn(ARGV[1])
  if chi and (chi > nhi or (chi == nhi and clo >= nlo)) then
    won = false
  end
end
if won then
  redis.call('SET', KEYS[1], ARGV[1])
end
local ttl = tonumber(ARGV[2])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
if won then return 1 end
return 0
`

// lsnDigits is the width of the LSN prefix of a stored value.
const lsnDigits = 16

// Put implements pgreplicahttp.TokenStore: the stored token becomes the
// one with the higher LSN, atomically, and the key then lives ttl (a
// ttl of zero or less: no expiry for a token it stores, and an unchanged
// TTL for one that stays). Redis keeps TTLs in milliseconds.
func (s *Store) Put(ctx context.Context, key string, tok pgreplica.Token, ttl time.Duration) error {
	value := fmt.Sprintf("%016X", uint64(tok.LSN)) + pgreplica.TokenCodec{}.Encode(tok)
	ms := max(ttl.Milliseconds(), 0)
	if ttl > 0 && ms == 0 {
		ms = 1
	}
	err := s.merge.Run(ctx, s.client, []string{s.prefix + key}, value, ms).Err()
	if err != nil {
		return fmt.Errorf("redisstore: put: %w", err)
	}
	return nil
}

// anyTime decodes stored tokens whatever their expiry; Get checks it
// against the real clock afterwards, so that an expired token reads as
// absent rather than as an error.
var anyTime = pgreplica.TokenCodec{Now: func() time.Time { return time.Unix(0, 0) }}

// Get implements pgreplicahttp.TokenStore. A value that is not in the
// store's format returns an error wrapping pgreplica.ErrBadToken.
func (s *Store) Get(ctx context.Context, key string) (pgreplica.Token, bool, error) {
	v, err := s.client.Get(ctx, s.prefix+key).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return pgreplica.Token{}, false, nil
	case err != nil:
		return pgreplica.Token{}, false, fmt.Errorf("redisstore: get: %w", err)
	}
	tok, err := parseValue(v)
	if err != nil {
		return pgreplica.Token{}, false, fmt.Errorf("redisstore: value of %q: %w", s.prefix+key, err)
	}
	if !tok.Expires.IsZero() && !time.Now().Before(tok.Expires) {
		return pgreplica.Token{}, false, nil
	}
	return tok, true, nil
}

func parseValue(v string) (pgreplica.Token, error) {
	if len(v) < lsnDigits {
		return pgreplica.Token{}, fmt.Errorf("%w: stored value too short", pgreplica.ErrBadToken)
	}
	lsn, err := strconv.ParseUint(v[:lsnDigits], 16, 64)
	if err != nil {
		return pgreplica.Token{}, fmt.Errorf("%w: stored LSN is not hexadecimal", pgreplica.ErrBadToken)
	}
	tok, err := anyTime.Decode(v[lsnDigits:])
	if err != nil {
		return pgreplica.Token{}, err
	}
	if uint64(tok.LSN) != lsn {
		return pgreplica.Token{}, fmt.Errorf("%w: stored LSN and token disagree", pgreplica.ErrBadToken)
	}
	return tok, nil
}
