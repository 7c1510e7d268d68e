package redisstore_test

import (
	"database/sql"
	"net/http"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/pgreplicahttp"
	"github.com/pgreplica/pgreplica/redisstore"
	"github.com/redis/go-redis/v9"
)

// Every instance of the application runs the same middleware against the
// same Redis: a user's write through one instance is seen by that user's
// next request on any instance, from any tab or device. (Compile-only: it
// needs Redis and a cluster.)
func ExampleNew() {
	db, err := sql.Open("pgreplica", "postgres://app@db1,db2,db3/shop?sslmode=disable")
	if err != nil {
		panic(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()

	mw := pgreplicahttp.Middleware(pgreplicahttp.Options{
		Codec: pgreplica.TokenCodec{Key: []byte("a secret of at least 32 random bytes"), TTL: 10 * time.Minute},
		Store: redisstore.New(rdb, "shop:pgreplica:"),
		StoreKey: func(r *http.Request) (string, bool) {
			user, _, ok := r.BasicAuth() // your authentication here
			return user, ok
		},
	})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /cart", func(w http.ResponseWriter, r *http.Request) {
		if _, err := db.ExecContext(r.Context(), "INSERT INTO cart_items (sku) VALUES ($1)", r.FormValue("sku")); err != nil {
			http.Error(w, "cannot save", http.StatusInternalServerError)
			return
		}
		http.Redirect(w, r, "/cart", http.StatusSeeOther)
	})
	_ = http.ListenAndServe("127.0.0.1:8080", mw(mux))
}
