package pgreplicahttp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/pgreplicahttp"
)

// fakeWrite stands in for a database write: the driver advances the
// request's session to the commit's LSN.
func fakeWrite(t *testing.T, r *http.Request, lsn pgreplica.LSN) {
	t.Helper()
	s := pgreplica.SessionFrom(r.Context())
	if s == nil {
		t.Fatal("no session in the request context")
	}
	if err := s.Merge(pgreplica.Token{LSN: lsn}); err != nil {
		t.Fatal(err)
	}
}

// seen records the session watermark a handler saw.
type seen struct{ lsn pgreplica.LSN }

// app is a handler that writes lsn on POST (and on GET when getWrites)
// and records the watermark it saw.
func app(t *testing.T, s *seen, lsn pgreplica.LSN, getWrites bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.lsn = pgreplica.SessionFrom(r.Context()).LSN()
		if r.Method == http.MethodPost || getWrites {
			fakeWrite(t, r, lsn)
		}
		if r.Method == http.MethodPost {
			http.Redirect(w, r, "/done", http.StatusSeeOther)
			return
		}
		w.Write([]byte("ok"))
	})
}

func serve(h http.Handler, method string, mod func(*http.Request)) *http.Response {
	req := httptest.NewRequest(method, "/x", nil)
	if mod != nil {
		mod(req)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

func cookieNamed(resp *http.Response, name string) *http.Cookie {
	for _, c := range resp.Cookies() {
		if c.Name == name {
			return c
		}
	}
	return nil
}

func TestCookieRoundTrip(t *testing.T) {
	var s seen
	h := pgreplicahttp.Middleware(pgreplicahttp.Options{Unsigned: true})(app(t, &s, 0x5_00000010, false))

	resp := serve(h, http.MethodPost, nil)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("status %d", resp.StatusCode)
	}
	c := cookieNamed(resp, pgreplicahttp.DefaultCookieName)
	if c == nil {
		t.Fatalf("no token cookie after a write: %v", resp.Header)
	}
	if !c.HttpOnly || !c.Secure || c.SameSite != http.SameSiteLaxMode || c.Path != "/" || c.MaxAge != 300 {
		t.Fatalf("cookie attributes: %s", c)
	}
	tok, err := pgreplica.ParseToken(c.Value)
	if err != nil || tok.LSN != 0x5_00000010 {
		t.Fatalf("cookie token %v, %v", tok, err)
	}

	resp = serve(h, http.MethodGet, func(r *http.Request) { r.AddCookie(c) })
	if s.lsn != 0x5_00000010 {
		t.Fatalf("GET with the cookie saw watermark %v", s.lsn)
	}
	if got := resp.Header.Values("Set-Cookie"); len(got) != 0 {
		t.Fatalf("GET that wrote nothing set a cookie: %q", got)
	}
}

func TestNoCookieWithoutAdvance(t *testing.T) {
	var s seen
	h := pgreplicahttp.Middleware(pgreplicahttp.Options{Unsigned: true})(app(t, &s, 0, false))
	for _, m := range []string{http.MethodPost, http.MethodGet} {
		if got := serve(h, m, nil).Header.Values("Set-Cookie"); len(got) != 0 {
			t.Errorf("%s without an advance set %q", m, got)
		}
	}
	// A lower position than the client's is no advance either.
	h = pgreplicahttp.Middleware(pgreplicahttp.Options{Unsigned: true})(app(t, &s, 10, false))
	resp := serve(h, http.MethodPost, func(r *http.Request) {
		r.AddCookie(&http.Cookie{Name: pgreplicahttp.DefaultCookieName, Value: tokenText(pgreplica.TokenCodec{}, 20)})
	})
	if got := resp.Header.Values("Set-Cookie"); len(got) != 0 || s.lsn != 20 {
		t.Errorf("write below the client's position: Set-Cookie %q, watermark %v", got, s.lsn)
	}
}

func tokenText(c pgreplica.TokenCodec, lsn pgreplica.LSN) string {
	return c.Encode(pgreplica.Token{LSN: lsn})
}

func TestWriteBackPolicy(t *testing.T) {
	var s seen
	getWrites := app(t, &s, 42, true)
	for _, tc := range []struct {
		policy pgreplicahttp.WriteBackPolicy
		method string
		want   bool
	}{
		{pgreplicahttp.WriteBackUnsafe, http.MethodGet, false},
		{pgreplicahttp.WriteBackUnsafe, http.MethodHead, false},
		{pgreplicahttp.WriteBackUnsafe, http.MethodPut, true},
		{pgreplicahttp.WriteBackUnsafe, http.MethodDelete, true},
		{pgreplicahttp.WriteBackAlways, http.MethodGet, true},
	} {
		h := pgreplicahttp.Middleware(pgreplicahttp.Options{Unsigned: true, WriteBack: tc.policy})(getWrites)
		got := cookieNamed(serve(h, tc.method, nil), pgreplicahttp.DefaultCookieName) != nil
		if got != tc.want {
			t.Errorf("policy %d, %s: cookie %v, want %v", tc.policy, tc.method, got, tc.want)
		}
	}
}

func TestHeaderTransport(t *testing.T) {
	var s seen
	codec := pgreplica.TokenCodec{Key: bytes.Repeat([]byte{7}, 32), TTL: time.Minute}
	h := pgreplicahttp.Middleware(pgreplicahttp.Options{
		Transport: pgreplicahttp.Header, HeaderName: "x-consistency", Codec: codec,
	})(app(t, &s, 500, false))

	resp := serve(h, http.MethodPost, func(r *http.Request) {
		r.Header.Set("X-Consistency", tokenText(codec, 100))
		// Header transport only: a cookie is not read.
		r.AddCookie(&http.Cookie{Name: pgreplicahttp.DefaultCookieName, Value: tokenText(codec, 1000)})
	})
	if s.lsn != 100 {
		t.Fatalf("handler saw %v, want the header's 0/64", s.lsn)
	}
	if len(resp.Cookies()) != 0 {
		t.Fatalf("header transport set a cookie")
	}
	tok, err := codec.Decode(resp.Header.Get("X-Consistency"))
	if err != nil || tok.LSN != 500 || tok.Expires.IsZero() {
		t.Fatalf("response header token %+v, %v", tok, err)
	}
}

func TestBothTransportsMaxMerge(t *testing.T) {
	var s seen
	h := pgreplicahttp.Middleware(pgreplicahttp.Options{Unsigned: true, Transport: pgreplicahttp.Both})(app(t, &s, 7000, false))
	resp := serve(h, http.MethodPost, func(r *http.Request) {
		r.Header.Set(pgreplicahttp.DefaultHeaderName, tokenText(pgreplica.TokenCodec{}, 300))
		r.AddCookie(&http.Cookie{Name: pgreplicahttp.DefaultCookieName, Value: tokenText(pgreplica.TokenCodec{}, 200)})
		r.AddCookie(&http.Cookie{Name: pgreplicahttp.DefaultCookieName, Value: tokenText(pgreplica.TokenCodec{}, 400)})
	})
	if s.lsn != 400 {
		t.Fatalf("watermark %v, want the highest of cookies and header, 0/190", s.lsn)
	}
	if cookieNamed(resp, pgreplicahttp.DefaultCookieName) == nil || resp.Header.Get(pgreplicahttp.DefaultHeaderName) == "" {
		t.Fatalf("Both wrote %v", resp.Header)
	}
}

func TestBadTokens(t *testing.T) {
	key := bytes.Repeat([]byte{1}, 32)
	codec := pgreplica.TokenCodec{Key: key}
	past := pgreplica.TokenCodec{Key: key, TTL: time.Minute, Now: func() time.Time { return time.Now().Add(-time.Hour) }}
	bad := map[string]string{
		"garbage":   "not a token!",
		"forged":    pgreplica.TokenCodec{Key: bytes.Repeat([]byte{2}, 32)}.Encode(pgreplica.Token{LSN: 1 << 60}),
		"unsigned":  tokenText(pgreplica.TokenCodec{}, 1<<60),
		"expired":   past.Encode(pgreplica.Token{LSN: 9}),
		"oversized": strings.Repeat("A", 5000),
		// Well formed and signed, but Options.Check refuses it (as
		// pgreplica.TokenCheck does a position ahead of the primary's).
		"refused by Check": codec.Encode(pgreplica.Token{LSN: 1 << 40}),
	}
	check := func(_ context.Context, tok pgreplica.Token) error {
		if tok.LSN > 1<<30 {
			return fmt.Errorf("%w: ahead", pgreplica.ErrBadToken)
		}
		return nil
	}
	for name, value := range bad {
		for _, policy := range []pgreplicahttp.BadTokenPolicy{pgreplicahttp.IgnoreBadToken, pgreplicahttp.RejectBadToken} {
			t.Run(fmt.Sprintf("%s/policy%d", name, policy), func(t *testing.T) {
				var logs bytes.Buffer
				s := seen{lsn: 12345}
				called := false
				h := pgreplicahttp.Middleware(pgreplicahttp.Options{
					Transport: pgreplicahttp.Both, Codec: codec, BadToken: policy, Check: check,
					Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
				})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					called = true
					app(t, &s, 0, false).ServeHTTP(w, r)
				}))
				for _, via := range []string{"cookie", "header"} {
					called = false
					resp := serve(h, http.MethodGet, func(r *http.Request) {
						if via == "cookie" {
							r.AddCookie(&http.Cookie{Name: pgreplicahttp.DefaultCookieName, Value: value})
						} else {
							r.Header.Set(pgreplicahttp.DefaultHeaderName, value)
						}
					})
					want := http.StatusOK
					if policy == pgreplicahttp.RejectBadToken {
						want = http.StatusBadRequest
					}
					if resp.StatusCode != want || called != (want == http.StatusOK) {
						t.Fatalf("policy %d via %s: status %d (handler called %v), want %d", policy, via, resp.StatusCode, called, want)
					}
					if called && s.lsn != 0 {
						t.Fatalf("a bad token set the watermark to %v", s.lsn)
					}
					c := cookieNamed(resp, pgreplicahttp.DefaultCookieName)
					if (via == "cookie") != (c != nil && c.MaxAge < 0) {
						t.Fatalf("policy %d via %s: deleting cookie %v", policy, via, c)
					}
				}
				if !strings.Contains(logs.String(), "bad token") || strings.Contains(logs.String(), value) {
					t.Fatalf("log: %s", logs.String())
				}
			})
		}
	}
}

func TestBadCookieReplacedByAdvance(t *testing.T) {
	var s seen
	h := pgreplicahttp.Middleware(pgreplicahttp.Options{Unsigned: true})(app(t, &s, 77, false))
	resp := serve(h, http.MethodPost, func(r *http.Request) {
		r.AddCookie(&http.Cookie{Name: pgreplicahttp.DefaultCookieName, Value: "garbage"})
	})
	cs := resp.Cookies()
	if len(cs) != 1 || cs[0].MaxAge <= 0 {
		t.Fatalf("want exactly the new token cookie, got %v", cs)
	}
}

func TestSessionInContextReused(t *testing.T) {
	outer := pgreplica.NewSession()
	var inner *pgreplica.Session
	h := pgreplicahttp.Middleware(pgreplicahttp.Options{Unsigned: true})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inner = pgreplica.SessionFrom(r.Context())
	}))
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req = req.WithContext(pgreplica.WithSession(req.Context(), outer))
	h.ServeHTTP(httptest.NewRecorder(), req)
	if inner != outer {
		t.Fatal("the middleware replaced the context's session")
	}
}

// TestInvalidOptions: New refuses invalid options with an error (a
// missing key with one that matches pgreplica.ErrNoTokenKey), and
// Middleware panics with the same error when the handler is built.
func TestInvalidOptions(t *testing.T) {
	key := bytes.Repeat([]byte{1}, 32)
	for name, o := range map[string]pgreplicahttp.Options{
		"no key":             {},
		"key and unsigned":   {Codec: pgreplica.TokenCodec{Key: key}, Unsigned: true},
		"store without key":  {Unsigned: true, Store: pgreplicahttp.NewMemoryStore(0)},
		"key without store":  {Unsigned: true, StoreKey: func(*http.Request) (string, bool) { return "", false }},
		"bad cookie name":    {Unsigned: true, CookieName: "a b"},
		"bad header name":    {Unsigned: true, HeaderName: "x:y"},
		"unknown transport":  {Unsigned: true, Transport: 8},
		"sub-second max age": {Unsigned: true, MaxAge: time.Millisecond},
		"negative max age":   {Unsigned: true, MaxAge: -time.Second},
		"unknown policy":     {Unsigned: true, BadToken: 9},
	} {
		t.Run(name, func(t *testing.T) {
			mw, err := pgreplicahttp.New(o)
			if mw != nil || err == nil || !strings.HasPrefix(err.Error(), "pgreplicahttp: ") {
				t.Fatalf("New: %v", err)
			}
			if noKey := errors.Is(err, pgreplica.ErrNoTokenKey); noKey != (name == "no key") {
				t.Errorf("New: %v; matches ErrNoTokenKey: %v", err, noKey)
			}
			defer func() {
				if r := recover(); r != err && (r == nil || r.(error).Error() != err.Error()) {
					t.Fatalf("Middleware panicked with %v, want New's error %v", r, err)
				}
			}()
			pgreplicahttp.Middleware(o)
		})
	}
	for name, o := range map[string]pgreplicahttp.Options{
		"key":      {Codec: pgreplica.TokenCodec{Key: key}},
		"unsigned": {Unsigned: true},
	} {
		if _, err := pgreplicahttp.New(o); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestCookieOptions(t *testing.T) {
	var s seen
	h := pgreplicahttp.Middleware(pgreplicahttp.Options{
		Unsigned:   true,
		CookieName: "rw", CookiePath: "/app", CookieDomain: "example.com",
		CookieInsecure: true, MaxAge: 90 * time.Second,
	})(app(t, &s, 5, false))
	c := cookieNamed(serve(h, http.MethodPost, nil), "rw")
	if c == nil || c.Secure || c.Path != "/app" || c.Domain != "example.com" || c.MaxAge != 90 || !c.HttpOnly {
		t.Fatalf("cookie %v", c)
	}
}

// failingStore fails every call.
type failingStore struct{}

var errStoreDown = errors.New("store down")

func (failingStore) Get(context.Context, string) (pgreplica.Token, bool, error) {
	return pgreplica.Token{}, false, errStoreDown
}
func (failingStore) Put(context.Context, string, pgreplica.Token, time.Duration) error {
	return errStoreDown
}

func TestStoreErrorsNeverFailTheRequest(t *testing.T) {
	var s seen
	var logs bytes.Buffer
	h := pgreplicahttp.Middleware(pgreplicahttp.Options{
		Unsigned: true,
		Store:    failingStore{},
		StoreKey: func(*http.Request) (string, bool) { return "u1", true },
		Logger:   slog.New(slog.NewTextHandler(&logs, nil)),
	})(app(t, &s, 9, false))
	resp := serve(h, http.MethodPost, nil)
	if resp.StatusCode != http.StatusSeeOther || cookieNamed(resp, pgreplicahttp.DefaultCookieName) == nil {
		t.Fatalf("status %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	if strings.Count(logs.String(), "store down") < 2 {
		t.Fatalf("store errors not logged: %s", logs.String())
	}
}

// xUser keys the store by the X-User header, as is.
func xUser(r *http.Request) (string, bool) {
	u := r.Header.Get("X-User")
	return u, u != ""
}

func TestStoreSharesAcrossClients(t *testing.T) {
	var s seen
	store := pgreplicahttp.NewMemoryStore(0)
	h := pgreplicahttp.Middleware(pgreplicahttp.Options{Unsigned: true, Store: store, StoreKey: xUser})(app(t, &s, 0xABC, false))
	as := func(user string) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set("X-User", user) }
	}
	serve(h, http.MethodPost, as("alice")) // tab 1 writes; its cookie stays in tab 1

	serve(h, http.MethodGet, as("alice")) // tab 2, no cookie
	if s.lsn != 0xABC {
		t.Fatalf("second tab saw %v, want 0/ABC", s.lsn)
	}
	serve(h, http.MethodGet, as("bob"))
	if s.lsn != 0 {
		t.Fatalf("another user saw %v", s.lsn)
	}
	serve(h, http.MethodGet, nil)
	if s.lsn != 0 || store.Len() != 1 {
		t.Fatalf("anonymous request saw %v; store holds %d keys", s.lsn, store.Len())
	}
}

func TestStoreAfterHeadersAndPanics(t *testing.T) {
	store := pgreplicahttp.NewMemoryStore(0)
	mw := pgreplicahttp.Middleware(pgreplicahttp.Options{Unsigned: true, Store: store, StoreKey: xUser})
	req := func(user string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.Header.Set("X-User", user)
		return r
	}
	// A write after the headers left still reaches the store.
	rec := httptest.NewRecorder()
	mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
		fakeWrite(t, r, 100)
	})).ServeHTTP(rec, req("late"))
	if len(rec.Result().Cookies()) != 0 {
		t.Fatal("a cookie was added after the headers were written")
	}
	if tok, ok, _ := store.Get(context.Background(), "late"); !ok || tok.LSN != 100 {
		t.Fatalf("late write: store has %v, %v", tok, ok)
	}
	// So does a write whose handler then panicked.
	func() {
		defer func() { recover() }()
		mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fakeWrite(t, r, 200)
			panic("boom")
		})).ServeHTTP(httptest.NewRecorder(), req("panic"))
	}()
	if tok, ok, _ := store.Get(context.Background(), "panic"); !ok || tok.LSN != 200 {
		t.Fatalf("panicking handler: store has %v, %v", tok, ok)
	}
}

// TestStoredBeforeRedirectLeaves: the store has the token by the time the
// client sees the response, even while the handler is still running.
func TestStoredBeforeRedirectLeaves(t *testing.T) {
	store := pgreplicahttp.NewMemoryStore(0)
	release := make(chan struct{})
	srv := httptest.NewServer(pgreplicahttp.Middleware(pgreplicahttp.Options{Unsigned: true, Store: store, StoreKey: xUser})(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fakeWrite(t, r, 0x77)
			w.Header().Set("Location", "/next")
			w.WriteHeader(http.StatusSeeOther)
			w.(http.Flusher).Flush()
			<-release // the handler goes on after the client has the 303
		})))
	defer srv.Close()
	defer close(release)
	req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
	req.Header.Set("X-User", "carol")
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if tok, ok, _ := store.Get(context.Background(), "carol"); !ok || tok.LSN != 0x77 {
		t.Fatalf("store when the 303 arrived: %v, %v", tok, ok)
	}
}

// TestSeveralClusters: one request writes to two databases (clusters a and
// b, b's LSNs far below a's); the cookie carries both positions, the next
// request's session has both, and the store of a user keeps both though
// two tabs write to different clusters.
func TestSeveralClusters(t *testing.T) {
	const a, b = 0xA, 0xB
	write := func(r *http.Request, sysid uint64, lsn pgreplica.LSN) {
		// As the driver records a write on cluster sysid.
		if err := pgreplica.SessionFrom(r.Context()).Merge(pgreplica.Token{LSN: lsn, Timeline: 1, SystemID: sysid}); err != nil {
			t.Fatal(err)
		}
	}
	var got pgreplica.Token
	h := pgreplicahttp.Middleware(pgreplicahttp.Options{Unsigned: true})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = pgreplica.SessionFrom(r.Context()).Snapshot()
		if r.Method == http.MethodPost {
			write(r, a, 0x7_00000000)
			write(r, b, 0x300)
		}
	}))
	c := cookieNamed(serve(h, http.MethodPost, nil), pgreplicahttp.DefaultCookieName)
	if c == nil {
		t.Fatal("no cookie after writes")
	}
	serve(h, http.MethodGet, func(r *http.Request) { r.AddCookie(c) })
	if got.LSNFor(a) != 0x7_00000000 || got.LSNFor(b) != 0x300 {
		t.Fatalf("next request's session: %+v", got)
	}

	// A POST that writes only to b, below what the cookie has for a, still
	// writes the token back: the session advanced on b.
	h = pgreplicahttp.Middleware(pgreplicahttp.Options{Unsigned: true})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		write(r, b, 0x400)
	}))
	resp := serve(h, http.MethodPost, func(r *http.Request) {
		r.AddCookie(&http.Cookie{Name: pgreplicahttp.DefaultCookieName, Value: pgreplica.TokenCodec{}.Encode(pgreplica.Token{LSN: 0x7_00000000, SystemID: a})})
	})
	c = cookieNamed(resp, pgreplicahttp.DefaultCookieName)
	if c == nil {
		t.Fatal("a write on the second cluster set no cookie")
	}
	if tok, err := pgreplica.ParseToken(c.Value); err != nil || tok.LSNFor(a) != 0x7_00000000 || tok.LSNFor(b) != 0x400 {
		t.Fatalf("cookie after a write on b: %+v, %v", tok, err)
	}

	// Two tabs of one user write to different clusters; a third sees both.
	store := pgreplicahttp.NewMemoryStore(0)
	h = pgreplicahttp.Middleware(pgreplicahttp.Options{Unsigned: true, Store: store, StoreKey: xUser})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = pgreplica.SessionFrom(r.Context()).Snapshot()
		switch r.URL.Query().Get("db") {
		case "a":
			write(r, a, 0x7_00000000)
		case "b":
			write(r, b, 0x300)
		}
	}))
	for _, path := range []string{"/?db=a", "/?db=b", "/"} {
		req := httptest.NewRequest(http.MethodPost, path, nil)
		req.Header.Set("X-User", "alice")
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	if got.LSNFor(a) != 0x7_00000000 || got.LSNFor(b) != 0x300 {
		t.Fatalf("third tab's session: %+v", got)
	}
	if tok, ok, _ := store.Get(context.Background(), "alice"); !ok || tok.LSNFor(a) != 0x7_00000000 || tok.LSNFor(b) != 0x300 {
		t.Fatalf("stored token: %+v %v", tok, ok)
	}
}
