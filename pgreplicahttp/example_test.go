package pgreplicahttp_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/pgreplicahttp"
)

// The middleware around an application. In a real handler the write is a
// db.ExecContext(r.Context(), ...) through pgreplica, which advances the
// request's session; here a Merge stands in for it so the example runs
// without a database.
func ExampleMiddleware() {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /items", func(w http.ResponseWriter, r *http.Request) {
		// db.ExecContext(r.Context(), "INSERT ...") does this:
		pgreplica.SessionFrom(r.Context()).Merge(pgreplica.Token{LSN: 0x16_B374D848})
		http.Redirect(w, r, "/items/1", http.StatusSeeOther)
	})
	mux.HandleFunc("GET /items/1", func(w http.ResponseWriter, r *http.Request) {
		// Reads through r.Context() need a replica that replayed this:
		fmt.Fprintln(w, "watermark", pgreplica.SessionFrom(r.Context()).LSN())
	})
	h := pgreplicahttp.Middleware(pgreplicahttp.Options{Unsigned: true, MaxAge: 2 * time.Minute})(mux)

	post := httptest.NewRecorder()
	h.ServeHTTP(post, httptest.NewRequest("POST", "/items", nil))
	cookie := post.Result().Cookies()[0]
	fmt.Println(post.Code, cookie.Name, "HttpOnly:", cookie.HttpOnly, "Secure:", cookie.Secure, "Max-Age:", cookie.MaxAge)

	get := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/items/1", nil)
	req.AddCookie(cookie) // the browser follows the redirect with it
	h.ServeHTTP(get, req)
	fmt.Print(get.Body.String())
	fmt.Println("cookies set by the GET:", len(get.Result().Cookies()))
	// Output:
	// 303 pgr_token HttpOnly: true Secure: true Max-Age: 120
	// watermark 16/B374D848
	// cookies set by the GET: 0
}

// A server-side store shares the token between a user's tabs, devices and
// (with a shared store such as redisstore) application instances.
func ExampleMiddleware_store() {
	store := pgreplicahttp.NewMemoryStore(0)
	h := pgreplicahttp.Middleware(pgreplicahttp.Options{
		Codec: pgreplica.TokenCodec{Key: []byte("an example key of at least 32 bytes!")},
		Store: store,
		StoreKey: func(r *http.Request) (string, bool) {
			user, _, ok := r.BasicAuth() // your authentication here
			return user, ok
		},
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Println(r.Method, "starts at", pgreplica.SessionFrom(r.Context()).LSN())
		if r.Method == http.MethodPost {
			pgreplica.SessionFrom(r.Context()).Merge(pgreplica.Token{LSN: 0x2A}) // a write
		}
	}))

	tab1 := httptest.NewRequest("POST", "/", nil)
	tab1.SetBasicAuth("alice", "secret")
	h.ServeHTTP(httptest.NewRecorder(), tab1)

	tab2 := httptest.NewRequest("GET", "/", nil) // no cookie from tab 1
	tab2.SetBasicAuth("alice", "secret")
	h.ServeHTTP(httptest.NewRecorder(), tab2)
	// Output:
	// POST starts at 0/0
	// GET starts at 0/2A
}

// Put max-merges: a request that finishes late with an older token does
// not lower the stored one.
func ExampleMemoryStore() {
	ctx := context.Background()
	store := pgreplicahttp.NewMemoryStore(10_000)
	store.Put(ctx, "alice", pgreplica.Token{LSN: 0x1_00000000}, 5*time.Minute)
	store.Put(ctx, "alice", pgreplica.Token{LSN: 0xFFFFFFFF}, 5*time.Minute) // older
	tok, ok, _ := store.Get(ctx, "alice")
	fmt.Println(tok.LSN, ok)
	// Output: 1/0 true
}

// A handler reads and writes through r.Context(); nothing else changes.
// (Compile-only: it needs a cluster.)
func ExampleMiddleware_handler() {
	db, err := sql.Open("pgreplica", "postgres://app@db1,db2,db3/shop?sslmode=disable")
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /items", func(w http.ResponseWriter, r *http.Request) {
		var id int64
		err := db.QueryRowContext(r.Context(),
			"INSERT INTO items (name) VALUES ($1) RETURNING id", r.FormValue("name")).Scan(&id)
		if err != nil {
			http.Error(w, "cannot save", http.StatusInternalServerError)
			return
		}
		http.Redirect(w, r, fmt.Sprint("/items/", id), http.StatusSeeOther)
	})
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		var name string
		err := db.QueryRowContext(r.Context(), "SELECT name FROM items WHERE id = $1", r.PathValue("id")).Scan(&name)
		if err != nil {
			http.NotFound(w, r) // never because a replica lagged behind this client's write
			return
		}
		fmt.Fprintln(w, name)
	})
	mw, err := pgreplicahttp.New(pgreplicahttp.Options{
		Codec: pgreplica.TokenCodec{Key: []byte("a secret of at least 32 random bytes"), TTL: 10 * time.Minute},
		Check: pgreplica.TokenCheck(db), // no position the primary has not written, no other cluster's
	})
	if err != nil {
		panic(err)
	}
	_ = http.ListenAndServe("127.0.0.1:8080", mw(mux))
}

// New refuses to make a middleware of unsigned tokens unless told to.
func ExampleNew() {
	_, err := pgreplicahttp.New(pgreplicahttp.Options{})
	fmt.Println(errors.Is(err, pgreplica.ErrNoTokenKey))
	_, err = pgreplicahttp.New(pgreplicahttp.Options{Unsigned: true}) // development only
	fmt.Println(err)
	// Output:
	// true
	// <nil>
}
