// Package redisstore is a pgreplicahttp.TokenStore in Redis, for tokens
// shared by the tabs, devices and application instances of one user: every
// instance that talks to the same Redis sees the highest position, per
// cluster, that any of them stored.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
//	mw := pgreplicahttp.Middleware(pgreplicahttp.Options{
//		Codec:    pgreplica.TokenCodec{Key: key},
//		Store:    redisstore.New(rdb, ""),
//		StoreKey: func(r *http.Request) (string, bool) { return userID(r) },
//	})
//
// # Storage
//
// Each key holds a Redis string of upper-case hexadecimal digits that a
// Lua script can read without decoding a token:
//
//	"P"              format marker
//	1 digit          flags: 1 = Overflow (see pgreplica.Token)
//	16 digits        Expires, Unix seconds; 0 = none
//	40 digits each   one position per cluster, at most
//	                 pgreplica.MaxClusters+1: system identifier (16),
//	                 LSN (16), timeline (8)
//
// Put max-merges atomically with a small Lua script run with EVALSHA,
// per cluster as pgreplica.Token.Merge does: a position replaces the
// stored one of its cluster only when its LSN is higher, a new cluster is
// appended (past the bound the value is marked Overflow instead), and the
// key's time to live is set with PEXPIRE. LSNs are 64-bit and Lua numbers
// are doubles, exact only up to 2^53, so the script compares the upper
// and lower 32-bit halves as two numbers (each parsed from 8 hex digits,
// exactly) rather than the whole LSN; system identifiers are only compared
// for equality, as text. Every key is a single Redis key, so the store
// works with Redis Cluster too.
//
// Values written by earlier releases (16 hex digits of LSN, then a version
// 1 token) are still read by Get. Put merges such a value as a position
// whose cluster is not known, which applies to every cluster: the script
// cannot decode the token inside, and that reading never loses a write;
// the value is rewritten in the current format.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
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

// maxMergeScript max-merges the value ARGV[1] (in the store's format,
// written by Put) into KEYS[1] per cluster, treating a stored value that
// Get would reject, or whose expiry (in seconds) is not after ARGV[3], as
// absent; ARGV[4] is the bound of clusters and ARGV[5] the largest
// expiry. It writes the result when it
// differs from what was stored, then gives the key a TTL of ARGV[2]
// milliseconds (0: none for a value it wrote; a stored value that stays
// keeps its TTL). It returns 1 when it wrote.
const maxMergeScript = `
local ZERO = '0000000000000000'
local now, bound, maxexp = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
-- parse reads a stored value, or returns nil for one that Get would
-- reject, so that Put replaces it.
local function parse(v)
  if not v then return nil end
  if string.sub(v, 1, 1) ~= 'P' then
    -- An earlier release's value: its LSN, of a cluster not known here.
    local lsn = string.sub(v, 1, 16)
    if #lsn == 16 and not string.find(lsn, '[^0-9A-F]') then
      return {ovf = false, exp = 0, exps = ZERO, pos = {{sid = ZERO, lsn = lsn, tl = '00000000'}}}
    end
    return nil
  end
  local flag = string.sub(v, 2, 2)
  if #v < 18 or #v > 18 + 40 * (bound + 1) or (#v - 18) % 40 ~= 0 or
      (flag ~= '0' and flag ~= '1') or string.find(v, '[^0-9A-F]', 2) then
    return nil
  end
  local exps = string.sub(v, 3, 18)
  local t = {ovf = flag == '1', exp = tonumber(exps, 16), exps = exps, pos = {}}
  if t.exp > maxexp then return nil end
  local known, seen = 0, {}
  for i = 19, #v, 40 do
    local p = {sid = string.sub(v, i, i + 15), lsn = string.sub(v, i + 16, i + 31), tl = string.sub(v, i + 32, i + 39)}
    if seen[p.sid] then return nil end
    seen[p.sid] = true
    if p.sid ~= ZERO then known = known + 1 end
    t.pos[#t.pos + 1] = p
  end
  if known > bound then return nil end
  return t
end
local function higher(a, b)
  local ahi, bhi = tonumber(string.sub(a, 1, 8), 16), tonumber(string.sub(b, 1, 8), 16)
  if ahi ~= bhi then return ahi > bhi end
  return tonumber(string.sub(a, 9, 16), 16) > tonumber(string.sub(b, 9, 16), 16)
end

local new = parse(ARGV[1])
local st = parse(redis.call('GET', KEYS[1]))
if st and st.exp > 0 and st.exp <= now then st = nil end
local changed = false
if not st then
  st = {ovf = false, exp = 0, exps = ZERO, pos = {}}
  changed = true
end
local tEmpty = #st.pos == 0 and not st.ovf
local uEmpty = #new.pos == 0 and not new.ovf
local known = 0
for _, q in ipairs(st.pos) do
  if q.sid ~= ZERO then known = known + 1 end
end
for _, p in ipairs(new.pos) do
  local q = nil
  for _, c in ipairs(st.pos) do
    if c.sid == p.sid then q = c break end
  end
  if q then
    if higher(p.lsn, q.lsn) then
      q.lsn, q.tl, changed = p.lsn, p.tl, true
    end
  elseif p.sid ~= ZERO and known >= bound then
    if not st.ovf then st.ovf, changed = true, true end
  else
    st.pos[#st.pos + 1] = p
    changed = true
    if p.sid ~= ZERO then known = known + 1 end
  end
end
if new.ovf and not st.ovf then st.ovf, changed = true, true end
-- The later expiry; 0 (none) is the latest; an empty value takes no part.
local exp, exps = st.exp, st.exps
if uEmpty then
elseif tEmpty or (exp ~= 0 and (new.exp == 0 or new.exp > exp)) then
  exp, exps = new.exp, new.exps
end
if exp ~= st.exp then st.exps, changed = exps, true end

if changed then
  local out = {'P', st.ovf and '1' or '0', st.exps}
  for _, p in ipairs(st.pos) do
    out[#out + 1] = p.sid .. p.lsn .. p.tl
  end
  redis.call('SET', KEYS[1], table.concat(out))
end
local ttl = tonumber(ARGV[2])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
if changed then return 1 end
return 0
`

// Stored value layout; see the package documentation.
const (
	valueMarker    = 'P'
	valueHeadLen   = 1 + 1 + 16 // marker, flags, expires
	valuePosLen    = 16 + 16 + 8
	oldLSNDigits   = 16 // the LSN prefix of an earlier release's value
	valueMaxLen    = valueHeadLen + (pgreplica.MaxClusters+1)*valuePosLen
	flagOverflow   = '1'
	flagNoOverflow = '0'
)

// Put implements pgreplicahttp.TokenStore: the stored token becomes the
// per-cluster max-merge of the two (pgreplica.Token.Merge), atomically,
// and the key then lives ttl (a ttl of zero or less: no expiry for a
// value Put changed, and an unchanged TTL for one it left as it was). A
// stored token whose own Expires has passed counts as absent. Redis keeps
// TTLs in milliseconds.
func (s *Store) Put(ctx context.Context, key string, tok pgreplica.Token, ttl time.Duration) error {
	ms := max(ttl.Milliseconds(), 0)
	if ttl > 0 && ms == 0 {
		ms = 1
	}
	err := s.merge.Run(ctx, s.client, []string{s.prefix + key},
		formatValue(tok), ms, time.Now().Unix(), pgreplica.MaxClusters, maxExpiry).Err()
	if err != nil {
		return fmt.Errorf("redisstore: put: %w", err)
	}
	return nil
}

// formatValue writes tok in the store's format: its positions that
// require something (non-zero LSN), one per cluster within the bound, as
// pgreplica.Token.Merge keeps them.
func formatValue(tok pgreplica.Token) string {
	norm, _ := pgreplica.Token{}.Merge(tok)
	var b strings.Builder
	b.Grow(valueMaxLen)
	b.WriteByte(valueMarker)
	if norm.Overflow {
		b.WriteByte(flagOverflow)
	} else {
		b.WriteByte(flagNoOverflow)
	}
	var exp int64
	if !tok.Expires.IsZero() {
		// Before 1970 is as expired as 1970, past 9999 as good as none:
		// the clamping pgreplica's tokens do.
		exp = min(max(tok.Expires.Unix(), 1), maxExpiry)
	}
	fmt.Fprintf(&b, "%016X", uint64(exp))
	for _, p := range norm.Positions() {
		if p.LSN != 0 {
			fmt.Fprintf(&b, "%016X%016X%08X", p.SystemID, uint64(p.LSN), p.Timeline)
		}
	}
	return b.String()
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

// parseValue reads a stored value, in the store's format or an earlier
// release's.
func parseValue(v string) (pgreplica.Token, error) {
	if len(v) > 0 && v[0] == valueMarker {
		return parsePositions(v)
	}
	if len(v) < oldLSNDigits {
		return pgreplica.Token{}, fmt.Errorf("%w: stored value too short", pgreplica.ErrBadToken)
	}
	lsn, err := strconv.ParseUint(v[:oldLSNDigits], 16, 64)
	if err != nil {
		return pgreplica.Token{}, fmt.Errorf("%w: stored LSN is not hexadecimal", pgreplica.ErrBadToken)
	}
	tok, err := anyTime.Decode(v[oldLSNDigits:])
	if err != nil {
		return pgreplica.Token{}, err
	}
	if uint64(tok.LSN) != lsn {
		return pgreplica.Token{}, fmt.Errorf("%w: stored LSN and token disagree", pgreplica.ErrBadToken)
	}
	return tok, nil
}

var errValue = fmt.Errorf("%w: stored value is not in the store's format", pgreplica.ErrBadToken)

// parsePositions reads a value in the store's format. It accepts only
// what the script writes: upper-case digits, at most one position per
// cluster, within the bound.
func parsePositions(v string) (pgreplica.Token, error) {
	if len(v) < valueHeadLen || len(v) > valueMaxLen || (len(v)-valueHeadLen)%valuePosLen != 0 ||
		(v[1] != flagOverflow && v[1] != flagNoOverflow) {
		return pgreplica.Token{}, errValue
	}
	hex := func(s string) (uint64, bool) {
		for i := range len(s) {
			if c := s[i]; (c < '0' || c > '9') && (c < 'A' || c > 'F') {
				return 0, false
			}
		}
		n, err := strconv.ParseUint(s, 16, 64)
		return n, err == nil
	}
	exp, ok := hex(v[2:valueHeadLen])
	if !ok || exp > maxExpiry {
		return pgreplica.Token{}, errValue
	}
	var ps []pgreplica.Position
	known := 0
	for i := valueHeadLen; i < len(v); i += valuePosLen {
		sysid, ok1 := hex(v[i : i+16])
		lsn, ok2 := hex(v[i+16 : i+32])
		tl, ok3 := hex(v[i+32 : i+40])
		if !ok1 || !ok2 || !ok3 {
			return pgreplica.Token{}, errValue
		}
		for _, p := range ps {
			if p.SystemID == sysid {
				return pgreplica.Token{}, errValue
			}
		}
		if sysid != 0 {
			known++
		}
		ps = append(ps, pgreplica.Position{SystemID: sysid, LSN: pgreplica.LSN(lsn), Timeline: uint32(tl)})
	}
	if known > pgreplica.MaxClusters {
		return pgreplica.Token{}, errValue
	}
	tok := pgreplica.Token{Overflow: v[1] == flagOverflow}
	if exp != 0 {
		tok.Expires = time.Unix(int64(exp), 0).UTC()
	}
	if len(ps) > 0 {
		tok.LSN, tok.Timeline, tok.SystemID = ps[0].LSN, ps[0].Timeline, ps[0].SystemID
	}
	if len(ps) > 1 {
		tok.Others = ps[1:]
	}
	return tok, nil
}

// maxExpiry is the largest expiry Put writes a token with: 9999-12-31,
// what pgreplica tokens carry at most.
const maxExpiry = 253402300799
