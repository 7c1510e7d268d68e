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
	// Put max-merges tok into the entry of key: the stored token becomes
	// the one with the higher LSN (compared numerically), so a request
	// that finishes late with an older token never lowers a newer one; on
	// equal LSNs the stored token stays. Either way the entry then lives
	// ttl from now; a ttl of zero or less means no expiry. A token whose
	// own Expires has passed counts as absent on Get.
	Put(ctx context.Context, key string, tok pgreplica.Token, ttl time.Duration) error
}

// replaces reports whether Put should replace stored with tok: the rule
// every TokenStore implements.
func replaces(stored, tok pgreplica.Token) bool {
	return tok.LSN > stored.LSN
}

// expired reports whether a token's own expiry has passed at now.
func expired(t pgreplica.Token, now time.Time) bool {
	return !t.Expires.IsZero() && !now.Before(t.Expires)
}
