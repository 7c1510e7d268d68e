package pgreplicahttp

import (
	"context"
	"fmt"
	"net/http"

	"github.com/pgreplica/pgreplica"
)

// Middleware returns an HTTP middleware that gives every request a
// pgreplica.Session carrying the client's token, so reads through
// r.Context() see the client's earlier writes, and hands the advanced token
// back to the client.
//
// For each request it:
//
//  1. decodes the token of the cookie and/or header (opts.Transport) with
//     opts.Codec, checks it with opts.Check, and reads the stored token of
//     opts.StoreKey(r) from opts.Store; every valid token max-merges into
//     the session. A bad token (one Decode or Check refused) is ignored or
//     answered with 400 (opts.BadToken), never a 500;
//  2. calls the handler with the session attached to the request context
//     (pgreplica.WithSession). A session already in the context is reused;
//  3. if the session advanced (opts.WriteBack), adds the new token as a
//     Set-Cookie and/or response header just before the headers leave (on
//     the handler's first WriteHeader, Write or Flush, or after it returns)
//     and puts it into the store before that, so the request that follows
//     a redirect already finds it. A response that did not advance the
//     session sets no cookie.
//
// The handler receives a wrapped http.ResponseWriter that keeps
// http.Flusher, io.ReaderFrom and, when the server's writer has them,
// http.Hijacker and http.Pusher; it has an Unwrap method for
// http.ResponseController.
//
// Middleware panics on invalid options, as http.ServeMux does on an
// invalid pattern: when the handler is built, at start-up, never on a
// request. New returns the same errors instead.
func Middleware(opts Options) func(http.Handler) http.Handler {
	mw, err := New(opts)
	if err != nil {
		panic(err)
	}
	return mw
}

// New returns Middleware's middleware, or an error for invalid options:
// one wrapping pgreplica.ErrNoTokenKey when opts.Codec.Key is empty and
// opts.Unsigned is not set (tokens would be unsigned: any client could
// forge one), others for values out of range (Store without StoreKey, a
// negative MaxAge, ...).
func New(opts Options) (func(http.Handler) http.Handler, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("pgreplicahttp: %w", err)
	}
	return func(next http.Handler) http.Handler {
		return &handler{o: o, next: next}
	}, nil
}

type handler struct {
	o    Options
	next http.Handler
}

// exchange is the middleware's state for one request.
type exchange struct {
	o       *Options
	r       *http.Request
	w       http.ResponseWriter // the server's writer
	session *pgreplica.Session

	// start holds the watermarks the client and the store brought, one
	// per cluster.
	start pgreplica.Token
	// startWrites is the session's WriteCount when the handler began.
	startWrites uint64
	writeBack   bool // the policy lets this request write back
	badCookie   bool // delete the client's cookie unless replaced

	storeKey string          // "" when the request does not use the store
	stored   pgreplica.Token // what the store holds, as far as this request knows
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	x := &exchange{o: &h.o, r: r, w: w, session: pgreplica.SessionFrom(r.Context())}
	if x.session == nil {
		x.session = pgreplica.NewSession()
	}
	if !x.readClient() {
		x.clearCookie()
		http.Error(w, "bad consistency token", http.StatusBadRequest)
		return
	}
	x.readStore()
	x.start = x.session.Snapshot()
	x.startWrites = x.session.WriteCount()
	x.writeBack = h.o.WriteBack == WriteBackAlways || !safeMethod(r.Method)

	rw, ww := wrap(w, x.beforeHeaders)
	defer x.afterHandler() // also after a panic: the write has committed
	h.next.ServeHTTP(ww, r.WithContext(pgreplica.WithSession(r.Context(), x.session)))
	rw.headersDone()
}

// readClient merges the tokens of the request's cookies and headers into
// the session. It reports false when a bad token must be rejected.
func (x *exchange) readClient() bool {
	bad := false
	if x.o.Transport&Cookie != 0 {
		for _, c := range x.r.CookiesNamed(x.o.CookieName) {
			if !x.merge("cookie", c.Value) {
				bad, x.badCookie = true, true
			}
		}
	}
	if x.o.Transport&Header != 0 {
		for _, v := range x.r.Header.Values(x.o.HeaderName) {
			if !x.merge("header", v) {
				bad = true
			}
		}
	}
	return !bad || x.o.BadToken == IgnoreBadToken
}

// merge decodes s and merges it into the session. An empty value counts as
// absent (a deleted cookie).
func (x *exchange) merge(source, s string) bool {
	if s == "" {
		return true
	}
	tok, err := x.o.Codec.Decode(s)
	if err == nil && x.o.Check != nil {
		err = x.o.Check(x.r.Context(), tok)
	}
	if err == nil {
		err = x.session.Merge(tok)
	}
	if err != nil {
		// Debug: clients send these, and a flood must not fill the logs.
		x.o.Logger.DebugContext(x.r.Context(), "pgreplicahttp: bad token", "source", source, "err", err)
		return false
	}
	return true
}

// readStore merges the request's stored token into the session.
func (x *exchange) readStore() {
	if x.o.Store == nil {
		return
	}
	key, ok := x.o.StoreKey(x.r)
	if !ok {
		return
	}
	x.storeKey = key
	ctx, cancel := context.WithTimeout(x.r.Context(), x.o.StoreTimeout)
	defer cancel()
	tok, found, err := x.o.Store.Get(ctx, key)
	if err == nil && found {
		err = x.session.Merge(tok)
	}
	if err != nil {
		x.o.Logger.WarnContext(x.r.Context(), "pgreplicahttp: reading the token store", "err", err)
		return
	}
	x.stored = tok
}

// advanced reports whether the token must go back: the request wrote
// through the session (any method, any cluster), or the session moved past
// what the client and the store already have, on any cluster, in a
// request that may write back.
func (x *exchange) advanced() bool {
	if x.session.WriteCount() != x.startWrites {
		return true
	}
	if !x.writeBack {
		return false
	}
	_, moved := x.start.Merge(x.session.Snapshot())
	return moved
}

// beforeHeaders runs once, just before the response headers leave.
func (x *exchange) beforeHeaders() {
	if !x.advanced() {
		if x.badCookie {
			x.clearCookie()
		}
		return
	}
	// The store first: once the headers leave, the client may follow a
	// redirect from another tab or instance at once.
	x.putStore()
	tok := x.o.Codec.SessionToken(x.session)
	if x.o.Transport&Cookie != 0 {
		x.setCookie(tok, int(x.o.MaxAge.Seconds()))
	}
	if x.o.Transport&Header != 0 {
		x.w.Header().Set(x.o.HeaderName, tok)
	}
}

// afterHandler stores what the handler wrote after the headers had left
// (a streamed response, a hijacked connection).
func (x *exchange) afterHandler() {
	if x.advanced() {
		x.putStore()
	}
}

// putStore max-merges the session's token into the store, unless the
// store already has every position of it.
func (x *exchange) putStore() {
	if x.storeKey == "" {
		return
	}
	tok := x.session.Snapshot()
	merged, changed := x.stored.Merge(tok)
	if !changed {
		return
	}
	// Not cancelled with the request: the write this token records has
	// committed whether or not the client is still there.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(x.r.Context()), x.o.StoreTimeout)
	defer cancel()
	if err := x.o.Store.Put(ctx, x.storeKey, tok, x.o.StoreTTL); err != nil {
		x.o.Logger.WarnContext(x.r.Context(), "pgreplicahttp: writing the token store", "err", err)
		return
	}
	x.stored = merged
}

func (x *exchange) setCookie(value string, maxAge int) {
	http.SetCookie(x.w, &http.Cookie{
		Name:     x.o.CookieName,
		Value:    value,
		Path:     x.o.CookiePath,
		Domain:   x.o.CookieDomain,
		MaxAge:   maxAge,
		Secure:   !x.o.CookieInsecure,
		HttpOnly: true,
		SameSite: http.SameSiteLaxMode,
	})
}

// clearCookie deletes a bad cookie (Max-Age=0).
func (x *exchange) clearCookie() {
	if x.badCookie {
		x.setCookie("", -1)
	}
}
