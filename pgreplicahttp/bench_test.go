package pgreplicahttp_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/pgreplicahttp"
)

var testKey = bytes.Repeat([]byte("k"), 32)

// BenchmarkMiddleware measures the middleware's own cost per request
// (no database): a GET with a signed cookie that writes nothing, and a
// POST that advances the session and gets a new signed cookie.
func BenchmarkMiddleware(b *testing.B) {
	codec := pgreplica.TokenCodec{Key: testKey}
	cookie := &http.Cookie{Name: pgreplicahttp.DefaultCookieName, Value: codec.Encode(pgreplica.Token{LSN: 100})}
	h := pgreplicahttp.Middleware(pgreplicahttp.Options{Codec: codec})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			pgreplica.SessionFrom(r.Context()).Merge(pgreplica.Token{LSN: 200})
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		b.Run(method, func(b *testing.B) {
			req := httptest.NewRequest(method, "/", nil)
			req.AddCookie(cookie)
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(httptest.NewRecorder(), req)
			}
		})
	}
}
