package pgreplicahttp_test

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica/pgreplicahttp"
)

// capabilities reports which optional interfaces a ResponseWriter has.
func capabilities(w http.ResponseWriter) (flush, hijack, readFrom, push bool) {
	_, flush = w.(http.Flusher)
	_, hijack = w.(http.Hijacker)
	_, readFrom = w.(io.ReaderFrom)
	_, push = w.(http.Pusher)
	return
}

// TestWrapperKeepsInterfaces: the handler's writer has the optional
// interfaces the server's writer has, over HTTP/1.1, HTTP/2 and a
// ResponseRecorder.
func TestWrapperKeepsInterfaces(t *testing.T) {
	type caps struct{ flush, hijack, readFrom, push bool }
	check := func(t *testing.T, deadlines bool, serve func(http.Handler)) {
		var outer, inner caps
		var deadlineErr error
		mw := pgreplicahttp.Middleware(pgreplicahttp.Options{Unsigned: true})
		serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			outer.flush, outer.hijack, outer.readFrom, outer.push = capabilities(w)
			mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				inner.flush, inner.hijack, inner.readFrom, inner.push = capabilities(w)
				// Reached through Unwrap.
				deadlineErr = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(time.Minute))
			})).ServeHTTP(w, r)
		}))
		outer.readFrom = true // emulated by the wrapper
		outer.flush = true    // likewise (a no-op where unsupported)
		if inner != outer {
			t.Fatalf("wrapper has %+v, server writer %+v (ReaderFrom and Flusher always)", inner, outer)
		}
		if (deadlineErr == nil) != deadlines {
			t.Fatalf("SetWriteDeadline through the wrapper: %v", deadlineErr)
		}
	}
	t.Run("http1", func(t *testing.T) {
		check(t, true, func(h http.Handler) {
			srv := httptest.NewServer(h)
			defer srv.Close()
			get(t, srv.Client(), srv.URL)
		})
	})
	t.Run("http2", func(t *testing.T) {
		check(t, true, func(h http.Handler) {
			srv := httptest.NewUnstartedServer(h)
			srv.EnableHTTP2 = true
			srv.StartTLS()
			defer srv.Close()
			resp := get(t, srv.Client(), srv.URL)
			if resp.ProtoMajor != 2 {
				t.Fatalf("served over %s", resp.Proto)
			}
		})
	})
	t.Run("recorder", func(t *testing.T) {
		check(t, false, func(h http.Handler) { h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil)) })
	})
}

func get(t *testing.T, c *http.Client, url string) *http.Response {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// TestFlushSendsCookie: a streamed response carries the token in the
// headers that the first Flush sends, before the body is complete.
func TestFlushSendsCookie(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(pgreplicahttp.Middleware(pgreplicahttp.Options{Unsigned: true, CookieInsecure: true})(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fakeWrite(t, r, 0x1234)
			io.WriteString(w, "first\n")
			if err := http.NewResponseController(w).Flush(); err != nil {
				t.Error(err)
			}
			<-release
			io.WriteString(w, "second\n")
		})))
	defer srv.Close()
	resp, err := srv.Client().Post(srv.URL, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if cookieNamed(resp, pgreplicahttp.DefaultCookieName) == nil {
		t.Fatalf("flushed headers carry no token cookie: %v", resp.Header)
	}
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "first\n" {
		t.Fatalf("first chunk %q, %v", line, err)
	}
	close(release)
	if rest, _ := io.ReadAll(br); string(rest) != "second\n" {
		t.Fatalf("rest %q", rest)
	}
}

// TestHijack: a handler can still take over the connection; the store
// (the cookie cannot be sent any more) gets the token.
func TestHijack(t *testing.T) {
	store := pgreplicahttp.NewMemoryStore(0)
	srv := httptest.NewServer(pgreplicahttp.Middleware(pgreplicahttp.Options{
		Unsigned: true,
		Store:    store,
		StoreKey: func(*http.Request) (string, bool) { return "hijacker", true },
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fakeWrite(t, r, 0x99)
		conn, rw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		rw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nhijacked")
		rw.Flush()
	})))
	defer srv.Close()
	resp, err := srv.Client().Post(srv.URL, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hijacked" {
		t.Fatalf("body %q", body)
	}
	if tok, ok, _ := store.Get(t.Context(), "hijacker"); !ok || tok.LSN != 0x99 {
		t.Fatalf("store after hijack: %v %v", tok, ok)
	}
}

// TestReadFromAndInformational: io.ReaderFrom and an informational 103
// before the final status both leave the token in the final headers.
func TestReadFromAndInformational(t *testing.T) {
	srv := httptest.NewServer(pgreplicahttp.Middleware(pgreplicahttp.Options{Unsigned: true, CookieInsecure: true})(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			fakeWrite(t, r, 0x42)
			if _, err := w.(io.ReaderFrom).ReadFrom(strings.NewReader("from a reader")); err != nil {
				t.Error(err)
			}
		})))
	defer srv.Close()
	resp, err := srv.Client().Post(srv.URL, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "from a reader" || cookieNamed(resp, pgreplicahttp.DefaultCookieName) == nil {
		t.Fatalf("status %d, body %q, header %v", resp.StatusCode, body, resp.Header)
	}
}
