package pgreplicahttp

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/pgreplica/pgreplica"
)

// Transport says where the middleware reads the token from and writes it
// back to. Values combine with |.
type Transport uint8

// Token transports.
const (
	// Cookie carries the token in a cookie: the browser returns it on the
	// next request, including the GET that follows a redirect.
	Cookie Transport = 1 << iota
	// Header carries the token in a request header and returns it in a
	// response header of the same name, for API clients and single-page
	// applications that keep it themselves.
	Header
	// Both reads the cookie and the header (the tokens max-merge) and
	// writes both.
	Both = Cookie | Header
)

// BadTokenPolicy says what happens to a request whose cookie or header
// holds a token that does not decode (garbled, forged, expired). Neither
// policy ever answers 500.
type BadTokenPolicy uint8

// Bad-token policies.
const (
	// IgnoreBadToken (the default) serves the request as if the token
	// were absent and deletes a bad cookie, so a stale cookie costs one
	// request, not one per request.
	IgnoreBadToken BadTokenPolicy = iota
	// RejectBadToken answers 400 Bad Request without calling the handler,
	// and deletes a bad cookie so that the client recovers on retry.
	RejectBadToken
)

// WriteBackPolicy says which requests may write the advanced token back.
type WriteBackPolicy uint8

// Write-back policies.
//
// The driver raises a session's watermark after every write and, for
// monotonic reads, after every replica read. Writing back after reads would
// set a cookie on nearly every GET of a busy site (including the first GET
// of every anonymous visitor), so by default only requests with an unsafe
// method write back.
const (
	// WriteBackUnsafe (the default) writes the token back when the request
	// wrote through the session (Session.WriteCount rose), whatever the
	// method, and when the session advanced at all during a request whose
	// method is not safe in the sense of RFC 9110 §9.2.1 (anything but GET,
	// HEAD, OPTIONS and TRACE). A GET that only read sets no cookie.
	WriteBackUnsafe WriteBackPolicy = iota
	// WriteBackAlways writes the token back whenever the session
	// advanced, whatever the method. The client then also gets monotonic
	// reads across requests, at the cost of a Set-Cookie (or header) on
	// most responses that read from a replica.
	WriteBackAlways
)

// Defaults for zero Options fields.
const (
	DefaultCookieName   = "pgr_token"
	DefaultHeaderName   = "X-PGReplica-Token"
	DefaultMaxAge       = 5 * time.Minute
	DefaultStoreTimeout = time.Second
)

// Options configure Middleware. Codec.Key is required unless Unsigned is
// set. Otherwise the zero value reads and writes the token in a Secure,
// HttpOnly, SameSite=Lax cookie named DefaultCookieName that lives
// DefaultMaxAge.
type Options struct {
	// Transport selects the cookie, the header or both; zero means Cookie.
	Transport Transport
	// CookieName and HeaderName name the cookie and the header; empty
	// means DefaultCookieName and DefaultHeaderName.
	CookieName string
	HeaderName string

	// Codec encodes the tokens the middleware writes and decodes the ones
	// it reads. Codec.Key (at least 32 random bytes, the same in every
	// instance; Codec.PreviousKeys while it rotates) keeps clients from
	// forging positions, and Codec.TTL makes a replayed token stop
	// counting. New refuses a codec without Key unless Unsigned is set.
	Codec pgreplica.TokenCodec
	// Unsigned lets the middleware run without Codec.Key: it then writes
	// and accepts unsigned tokens, which any client can forge. For
	// development and tests; with Codec.Key set it is an error.
	Unsigned bool
	// Check, when set, is run on every token a client sends once it
	// decoded; a token it returns an error for is a bad token (BadToken
	// says what happens). pgreplica.TokenCheck(db) refuses a token with a
	// position ahead of everything the primary has written, or one of
	// another cluster (another deployment's): set it to that. Without it
	// such a token is taken, and costs the requests that bring it no more
	// than a token of the primary's newest write (see pgreplica.Token).
	Check func(ctx context.Context, t pgreplica.Token) error

	// MaxAge is the cookie's Max-Age; zero means DefaultMaxAge. A token
	// only matters until every replica has replayed its position, which
	// takes milliseconds to seconds, so a short life is enough.
	MaxAge time.Duration
	// CookiePath and CookieDomain set the cookie's Path (default "/") and
	// Domain (default none: a host-only cookie).
	CookiePath   string
	CookieDomain string
	// CookieInsecure drops the cookie's Secure attribute, for development
	// over plain HTTP. The cookie is always HttpOnly and SameSite=Lax:
	// scripts never need it, and Lax still sends it on the top-level GET
	// that follows a redirect.
	CookieInsecure bool

	// BadToken is the policy for undecodable tokens; default
	// IgnoreBadToken.
	BadToken BadTokenPolicy
	// WriteBack says which requests write the token back; default
	// WriteBackUnsafe.
	WriteBack WriteBackPolicy

	// Store, when set, shares tokens between the tabs, devices and
	// application instances of one user: the middleware reads the token
	// stored under StoreKey(r) before the handler and max-merges the
	// advanced token into the store as soon as the response headers are
	// written (so that a redirect followed at once already sees it) and
	// again after the handler if the session advanced further.
	Store TokenStore
	// StoreKey returns the store key of a request, typically the
	// authenticated user's id; ok false (an anonymous request) skips the
	// store. Required with Store.
	StoreKey func(r *http.Request) (key string, ok bool)
	// StoreTTL is how long a stored token lives after its last Put; zero
	// means MaxAge.
	StoreTTL time.Duration
	// StoreTimeout bounds each store call; zero means
	// DefaultStoreTimeout. A store error or timeout never fails the
	// request: it is logged and the request goes on with the tokens it
	// has. Puts are not cancelled when the client goes away, because the
	// write they record has committed.
	StoreTimeout time.Duration

	// Logger receives bad tokens (Debug: they come from clients) and
	// store errors (Warn). Nil discards.
	Logger *slog.Logger
}

// withDefaults validates o and fills in the defaults. Invalid options are
// programming errors, reported by New with an error and by Middleware with
// a panic, like an invalid pattern given to http.ServeMux.
func (o Options) withDefaults() (Options, error) {
	switch {
	case len(o.Codec.Key) == 0 && !o.Unsigned:
		return o, fmt.Errorf("Options.Codec.Key is empty and Options.Unsigned is not set: %w", pgreplica.ErrNoTokenKey)
	case len(o.Codec.Key) > 0 && o.Unsigned:
		return o, fmt.Errorf("Options.Unsigned is set with Options.Codec.Key: choose one")
	}
	if o.Transport == 0 {
		o.Transport = Cookie
	}
	if o.Transport&^Both != 0 {
		return o, fmt.Errorf("unknown Transport %d", o.Transport)
	}
	if o.CookieName == "" {
		o.CookieName = DefaultCookieName
	}
	if !validCookieName(o.CookieName) {
		return o, fmt.Errorf("invalid CookieName %q", o.CookieName)
	}
	if o.HeaderName == "" {
		o.HeaderName = DefaultHeaderName
	}
	if !validCookieName(o.HeaderName) { // header names are RFC 9110 tokens too
		return o, fmt.Errorf("invalid HeaderName %q", o.HeaderName)
	}
	o.HeaderName = http.CanonicalHeaderKey(o.HeaderName)
	if o.CookiePath == "" {
		o.CookiePath = "/"
	}
	switch {
	case o.MaxAge < 0:
		return o, fmt.Errorf("negative MaxAge %v", o.MaxAge)
	case o.MaxAge == 0:
		o.MaxAge = DefaultMaxAge
	case o.MaxAge < time.Second:
		return o, fmt.Errorf("MaxAge %v is below the one-second precision of cookies", o.MaxAge)
	}
	if o.BadToken > RejectBadToken {
		return o, fmt.Errorf("unknown BadToken policy %d", o.BadToken)
	}
	if o.WriteBack > WriteBackAlways {
		return o, fmt.Errorf("unknown WriteBack policy %d", o.WriteBack)
	}
	switch {
	case o.Store != nil && o.StoreKey == nil:
		return o, fmt.Errorf("option Store needs StoreKey")
	case o.Store == nil && o.StoreKey != nil:
		return o, fmt.Errorf("StoreKey without Store")
	case o.StoreTTL < 0 || o.StoreTimeout < 0:
		return o, fmt.Errorf("negative StoreTTL or StoreTimeout")
	}
	if o.StoreTTL == 0 {
		o.StoreTTL = o.MaxAge
	}
	if o.StoreTimeout == 0 {
		o.StoreTimeout = DefaultStoreTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// validCookieName reports whether s is an RFC 9110 token, the syntax of
// both cookie names and header field names.
func validCookieName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`()<>@,;:\"/[]?={}`, c) >= 0 {
			return false
		}
	}
	return true
}

// safeMethod reports the methods RFC 9110 §9.2.1 defines as safe.
func safeMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}
