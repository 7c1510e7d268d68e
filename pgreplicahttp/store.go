package pgreplicahttp

import (
	"context"
	"time"

	"github.com/pgreplica/pgreplica"
)

// TokenStore keeps one token per key (typically a user id) on the server,
// so that every tab, device and application instance of that user reads
// its writes: a cookie lives in one browser, and a second tab that loaded
// its page before the write holds an older cookie.
//
// Implementations must be safe for concurrent use, also across processes
// when the store is shared (redisstore does it atomically in Redis).
type TokenStore interface {
	// Get returns the token stored under key. A missing or expired entry
	// is ok false with a nil error; err reports only a failing store.
	Get(ctx context.Context, key string) (tok pgreplica.Token, ok bool, err error)
	// Put max-merges tok into the entry of key, per cluster, as
	// pgreplica.Token.Merge does: for each cluster (system identifier) the
	// stored position becomes the one with the higher LSN (compared
	// numerically), so a request that finishes late with an older token
	// never lowers a newer one and a write on one cluster never drops
	// another cluster's position; on equal LSNs the stored position stays.
	// Either way the entry then lives ttl from now; a ttl of zero or less
	// means no expiry for an entry Put changed, and an unchanged TTL for
	// one it left as it was. A stored token whose own Expires has passed
	// counts as absent, on Put as on Get.
	Put(ctx context.Context, key string, tok pgreplica.Token, ttl time.Duration) error
}

// merged returns what Put stores when the entry holds stored (found false:
// nothing, or an entry whose token expired at now), and whether that
// changes the entry: the rule every TokenStore implements.
func merged(stored pgreplica.Token, found bool, tok pgreplica.Token, now time.Time) (pgreplica.Token, bool) {
	if !found || expired(stored, now) {
		stored = pgreplica.Token{}
	}
	m, changed := stored.Merge(tok)
	return m, changed || !found
}

// expired reports whether a token's own expiry has passed at now.
func expired(t pgreplica.Token, now time.Time) bool {
	return !t.Expires.IsZero() && !now.Before(t.Expires)
}
