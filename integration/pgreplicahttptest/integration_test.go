package pgreplicahttptest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/pgreplicahttp"
)

var testKey = bytes.Repeat([]byte("k"), 32)

// browser returns a client of srv with its own cookie jar.
func browser(t *testing.T, srv *httptest.Server) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := *srv.Client()
	c.Jar = jar
	return &c
}

// anonymous returns a client of srv without cookies.
func anonymous(srv *httptest.Server) *http.Client {
	c := *srv.Client()
	return &c
}

type page struct {
	resp *http.Response
	body string
}

// do sends a request as user (none when empty) and reads the response.
func do(t *testing.T, c *http.Client, method, u, user string, form url.Values, cookies ...*http.Cookie) page {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxFor(t), method, u, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if user != "" {
		req.Header.Set("X-User", user) // forwarded on the same-host redirect
	}
	for _, ck := range cookies {
		req.AddCookie(ck)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode >= 500 {
		t.Fatalf("%s %s: %s %s", method, u, resp.Status, body)
	}
	return page{resp, string(body)}
}

// create POSTs a new item and follows the 303; it returns the item's page.
func create(t *testing.T, c *http.Client, srv *httptest.Server, user, v string) page {
	t.Helper()
	p := do(t, c, http.MethodPost, srv.URL+"/items", user, url.Values{"v": {v}})
	if p.resp.Request.Method != http.MethodGet || !strings.HasPrefix(p.resp.Request.URL.Path, "/items/") {
		t.Fatalf("POST was not redirected to the item: ended at %s %s", p.resp.Request.Method, p.resp.Request.URL)
	}
	return p
}

func isReplica(n int) bool { return n != cluster.Primary() }

// TestRedirectAfterPost: the GET that follows a POST's 303 with the
// token cookie sees the write while replay is paused on every replica; a
// client without the cookie reads a replica (and does not see it); bad
// cookies are ignored, or rejected with 400 by option, never a 500.
func TestRedirectAfterPost(t *testing.T) {
	db := openDB(t)
	table := itemsTable(t, db)
	app := itemsApp(t, db, table)
	codec := pgreplica.TokenCodec{Key: testKey, TTL: time.Minute}
	srv := httptest.NewTLSServer(pgreplicahttp.Middleware(pgreplicahttp.Options{Codec: codec})(app))
	defer srv.Close()
	pauseReplicas(t)

	b := browser(t, srv)
	p := create(t, b, srv, "", "fresh")
	if p.resp.StatusCode != http.StatusOK || p.body != "fresh" {
		t.Fatalf("redirected GET with the cookie: %s %q (served by node %d)", p.resp.Status, p.body, nodeOf(t, p.resp))
	}
	if n := nodeOf(t, p.resp); isReplica(n) {
		t.Fatalf("served by paused replica %d", n)
	}
	srvURL, _ := url.Parse(srv.URL)
	var tokenCookie *http.Cookie
	for _, c := range b.Jar.Cookies(srvURL) {
		if c.Name == pgreplicahttp.DefaultCookieName {
			tokenCookie = c
		}
	}
	if tokenCookie == nil {
		t.Fatal("no token cookie in the jar")
	}
	if tok, err := codec.Decode(tokenCookie.Value); err != nil || tok.LSN == 0 {
		t.Fatalf("jar token %+v, %v", tok, err)
	}
	itemURL := srv.URL + p.resp.Request.URL.Path

	// Without the cookie: any replica, which has not replayed the write.
	anon := anonymous(srv)
	p = do(t, anon, http.MethodGet, itemURL, "", nil)
	if n := nodeOf(t, p.resp); !isReplica(n) || p.resp.StatusCode != http.StatusNotFound {
		t.Fatalf("without the cookie: %s from node %d, want 404 from a replica", p.resp.Status, n)
	}
	// Its pages never carry a cookie: it wrote nothing.
	if len(p.resp.Cookies()) != 0 {
		t.Fatalf("a read-only request set %v", p.resp.Cookies())
	}

	// Bad cookies: ignored, so the request reads a replica like a client
	// without one.
	expired := pgreplica.TokenCodec{Key: testKey, TTL: time.Minute, Now: func() time.Time { return time.Now().Add(-time.Hour) }}
	bad := map[string]string{
		"garbled":  "%%%not-a-token",
		"forged":   pgreplica.TokenCodec{Key: bytes.Repeat([]byte("x"), 32)}.Encode(pgreplica.Token{LSN: 1 << 62}),
		"unsigned": pgreplica.TokenCodec{}.Encode(pgreplica.Token{LSN: 1 << 62}),
		"expired":  expired.Encode(pgreplica.Token{LSN: 1 << 62}),
	}
	for name, value := range bad {
		p = do(t, anon, http.MethodGet, itemURL, "", nil, &http.Cookie{Name: pgreplicahttp.DefaultCookieName, Value: value})
		if n := nodeOf(t, p.resp); !isReplica(n) || p.resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s cookie: %s from node %d, want it ignored (404 from a replica)", name, p.resp.Status, n)
		}
	}
	strict := httptest.NewTLSServer(pgreplicahttp.Middleware(pgreplicahttp.Options{
		Codec: codec, BadToken: pgreplicahttp.RejectBadToken,
	})(app))
	defer strict.Close()
	for name, value := range bad {
		p = do(t, anonymous(strict), http.MethodGet, strict.URL+"/items/1", "", nil, &http.Cookie{Name: pgreplicahttp.DefaultCookieName, Value: value})
		if p.resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s cookie with RejectBadToken: %s, want 400", name, p.resp.Status)
		}
	}
	// The valid cookie works on the strict server too.
	p = do(t, anonymous(strict), http.MethodGet, strings.Replace(itemURL, srv.URL, strict.URL, 1), "", nil, tokenCookie)
	if p.resp.StatusCode != http.StatusOK || isReplica(nodeOf(t, p.resp)) {
		t.Fatalf("valid cookie on the strict server: %s from node %d", p.resp.Status, nodeOf(t, p.resp))
	}
}

// userKey keys the store by X-User, standing in for an authenticated user.
func userKey(r *http.Request) (string, bool) {
	u := r.Header.Get("X-User")
	return "user:" + u, u != ""
}

// TestSecondTabMemoryStore: another tab (or device) of the same user,
// without the first tab's cookie, sees the write through the shared store.
func TestSecondTabMemoryStore(t *testing.T) {
	db := openDB(t)
	table := itemsTable(t, db)
	srv := httptest.NewTLSServer(pgreplicahttp.Middleware(pgreplicahttp.Options{
		Codec: pgreplica.TokenCodec{Key: testKey}, Store: pgreplicahttp.NewMemoryStore(0), StoreKey: userKey,
	})(itemsApp(t, db, table)))
	defer srv.Close()
	pauseReplicas(t)

	p := create(t, browser(t, srv), srv, "alice", "from tab 1")
	itemURL := srv.URL + p.resp.Request.URL.Path
	tab2 := browser(t, srv) // empty jar: loaded before the write
	p = do(t, tab2, http.MethodGet, itemURL, "alice", nil)
	if p.resp.StatusCode != http.StatusOK || p.body != "from tab 1" || isReplica(nodeOf(t, p.resp)) {
		t.Fatalf("second tab: %s %q from node %d", p.resp.Status, p.body, nodeOf(t, p.resp))
	}
	p = do(t, browser(t, srv), http.MethodGet, itemURL, "bob", nil)
	if p.resp.StatusCode != http.StatusNotFound || !isReplica(nodeOf(t, p.resp)) {
		t.Fatalf("another user: %s from node %d, want 404 from a replica", p.resp.Status, nodeOf(t, p.resp))
	}
}

// TestStreamingAndHijackOnCluster: a streamed response hands out the token
// in the headers of its first Flush, so the client can read its write
// while the stream is still open; a hijacked connection still records its
// token in the store.
func TestStreamingAndHijackOnCluster(t *testing.T) {
	db := openDB(t)
	table := itemsTable(t, db)
	app := itemsApp(t, db, table)
	insert := func(r *http.Request) int {
		var id int
		if err := db.QueryRowContext(r.Context(), "INSERT INTO "+table+" (v) VALUES ($1) RETURNING id", r.URL.Path).Scan(&id); err != nil {
			t.Errorf("insert: %v", err)
		}
		return id
	}
	release := make(chan struct{})
	app.HandleFunc("POST /stream", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, insert(r))
		w.(http.Flusher).Flush()
		<-release
		fmt.Fprintln(w, "done")
	})
	app.HandleFunc("POST /hijack", func(w http.ResponseWriter, r *http.Request) {
		id := strconv.Itoa(insert(r))
		conn, rw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		fmt.Fprintf(rw, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(id), id)
		rw.Flush()
	})
	srv := httptest.NewTLSServer(pgreplicahttp.Middleware(pgreplicahttp.Options{
		Unsigned: true,
		Store:    pgreplicahttp.NewMemoryStore(0), StoreKey: userKey,
	})(app))
	defer srv.Close()
	pauseReplicas(t)

	b := browser(t, srv)
	req, _ := http.NewRequestWithContext(ctxFor(t), http.MethodPost, srv.URL+"/stream", nil)
	resp, err := b.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	p := do(t, b, http.MethodGet, srv.URL+"/items/"+strings.TrimSpace(line), "", nil)
	close(release)
	if p.resp.StatusCode != http.StatusOK || p.body != "/stream" {
		t.Fatalf("read during the stream: %s %q from node %d", p.resp.Status, p.body, nodeOf(t, p.resp))
	}

	// srv.Client speaks HTTP/1.1 to a TLS httptest server, so Hijack works.
	p = do(t, b, http.MethodPost, srv.URL+"/hijack", "dave", nil)
	if p.resp.StatusCode != http.StatusOK {
		t.Fatalf("hijacked response: %s %q", p.resp.Status, p.body)
	}
	p = do(t, browser(t, srv), http.MethodGet, srv.URL+"/items/"+p.body, "dave", nil)
	if p.resp.StatusCode != http.StatusOK || p.body != "/hijack" {
		t.Fatalf("after a hijacked write, another tab: %s %q from node %d", p.resp.Status, p.body, nodeOf(t, p.resp))
	}
}

// TestGetThatWritesHandsTokenBack: a GET handler that writes (a "mark as
// read" link) passes its token on under the default policy; a GET that
// only reads sets no cookie.
func TestGetThatWritesHandsTokenBack(t *testing.T) {
	db := openDB(t)
	table := itemsTable(t, db)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /touch", func(w http.ResponseWriter, r *http.Request) {
		if _, err := db.ExecContext(r.Context(), "INSERT INTO "+table+" (v) VALUES ('touched')"); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /look", func(w http.ResponseWriter, r *http.Request) {
		var n int
		if err := db.QueryRowContext(r.Context(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	srv := httptest.NewTLSServer(pgreplicahttp.Middleware(pgreplicahttp.Options{Unsigned: true})(mux))
	defer srv.Close()
	c := anonymous(srv)
	p := do(t, c, http.MethodGet, srv.URL+"/touch", "", nil)
	if p.resp.StatusCode != http.StatusNoContent {
		t.Fatalf("GET /touch: %s", p.resp.Status)
	}
	if !hasTokenCookie(p.resp) {
		t.Fatal("a GET that wrote set no token cookie: the next request could miss the write")
	}
	p = do(t, c, http.MethodGet, srv.URL+"/look", "", nil)
	if hasTokenCookie(p.resp) {
		t.Fatalf("a GET that only read set %v", p.resp.Cookies())
	}
}

func hasTokenCookie(resp *http.Response) bool {
	for _, ck := range resp.Cookies() {
		if ck.Name == pgreplicahttp.DefaultCookieName && ck.Value != "" && ck.MaxAge >= 0 {
			return true
		}
	}
	return false
}
