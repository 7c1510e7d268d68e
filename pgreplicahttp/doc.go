// Package pgreplicahttp carries pgreplica's read-your-writes guarantee
// across HTTP requests: a middleware that keeps each client's consistency
// token in a cookie and/or a header, and a TokenStore that shares it
// between the tabs, devices and application instances of one user.
//
// # The problem it solves
//
// A handler saves, redirects, and the browser's next GET reads a replica
// that has not replayed the save yet: the user sees the old value, or a
// 404 for what they just created. With the middleware the POST's write
// advances the request's pgreplica.Session, the response carries the
// session's token, and the GET that follows brings it back, so its reads
// go to a replica that has replayed the write, or to the primary when none
// has within the driver's wait budget. Clients that wrote nothing recently
// carry no token and read any healthy replica.
//
// Handlers need no change beyond passing r.Context() to database/sql
// (QueryContext, ExecContext, BeginTx) or their ORM:
//
//	db, _ := sql.Open("pgreplica", dsn)
//	mux := http.NewServeMux()
//	mux.HandleFunc("POST /items", func(w http.ResponseWriter, r *http.Request) {
//		var id int
//		err := db.QueryRowContext(r.Context(), "INSERT INTO items (name) VALUES ($1) RETURNING id",
//			r.FormValue("name")).Scan(&id)
//		...
//		http.Redirect(w, r, fmt.Sprint("/items/", id), http.StatusSeeOther)
//	})
//	mw, err := pgreplicahttp.New(pgreplicahttp.Options{
//		Codec: pgreplica.TokenCodec{Key: key, TTL: 10 * time.Minute},
//		Check: pgreplica.TokenCheck(db),
//	})
//	if err != nil {
//		log.Fatal(err) // pgreplica.ErrNoTokenKey without a key
//	}
//	http.ListenAndServe(addr, mw(mux))
//
// # Frameworks
//
// Middleware has the standard func(http.Handler) http.Handler shape, so it
// plugs into net/http, chi (r.Use(mw)), gorilla/mux (r.Use(mw)) and
// anything else built on http.Handler.
//
// Echo v4 adapts it with its own helper, which also hands Echo the wrapped
// ResponseWriter:
//
//	e.Use(echo.WrapMiddleware(pgreplicahttp.Middleware(opts)))
//
// Gin needs its ResponseWriter wrapped too, because its handlers write to
// c.Writer; route the writes through the middleware's writer so that the
// cookie is added before the headers leave:
//
//	func pgreplicaGin(opts pgreplicahttp.Options) gin.HandlerFunc {
//		mw := pgreplicahttp.Middleware(opts)
//		return func(c *gin.Context) {
//			mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
//				c.Request = r
//				c.Writer = &ginWriter{ResponseWriter: c.Writer, w: w}
//				c.Next()
//			})).ServeHTTP(c.Writer, c.Request)
//		}
//	}
//
//	// ginWriter sends gin's writes through pgreplicahttp's writer.
//	type ginWriter struct {
//		gin.ResponseWriter
//		w http.ResponseWriter
//	}
//
//	func (g *ginWriter) WriteHeader(code int)              { g.w.WriteHeader(code) }
//	func (g *ginWriter) Write(b []byte) (int, error)       { return g.w.Write(b) }
//	func (g *ginWriter) WriteString(s string) (int, error) { return io.WriteString(g.w, s) }
//	func (g *ginWriter) Flush()                            { g.w.(http.Flusher).Flush() }
//	func (g *ginWriter) WriteHeaderNow() {
//		if !g.Written() {
//			g.w.WriteHeader(g.Status())
//		}
//		g.ResponseWriter.WriteHeaderNow()
//	}
//
// # When the token is written back
//
// When the request wrote through the session (Session.WriteCount rose), on
// any cluster, whatever its method, so pages that wrote nothing set no
// cookie. The driver also advances a session after replica reads
// (monotonic reads), which on a busy cluster is nearly every read; by default
// (WriteBackUnsafe) such read-only advances are written back only by
// requests with an unsafe method (POST, PUT, PATCH, DELETE, ...), so a GET
// that only read sets no cookie. WriteBackAlways writes them back on every
// method, for monotonic reads across page loads.
//
// # Cookies, headers and the store
//
// The cookie (Options.Transport Cookie, the default) suits browsers: it is
// HttpOnly, SameSite=Lax (so the GET after a redirect carries it), Secure
// unless Options.CookieInsecure, and short-lived (Options.MaxAge, 5
// minutes by default), because a token only matters until every replica has
// replayed its position. The header (Transport Header) suits API clients,
// which copy the response's X-PGReplica-Token header into their next
// request; a browser script reading it cross-origin needs it listed in
// Access-Control-Expose-Headers.
//
// # Signed and checked tokens
//
// A client may send any token. New refuses options without
// Options.Codec.Key (an error matching pgreplica.ErrNoTokenKey) unless
// Options.Unsigned says unsigned tokens are wanted, for development:
// unsigned, a client could claim any position. Middleware, whose shape
// returns no error, panics with the same error when the handler is built.
// Options.Check: pgreplica.TokenCheck(db) also refuses a signed token with
// a position ahead of everything the primary has written, or one of
// another cluster; and whatever a token claims, the driver never waits
// for a position the primary has not written (see pgreplica.Token).
//
// A cookie lives in one browser, and a tab that loaded its page before a
// write in another tab may send an older one. When a user's other tabs and
// devices must see a write, set Options.Store (a MemoryStore for a single
// application instance, the Redis store of the sibling module redisstore
// for several) and Options.StoreKey (the authenticated user's id): every
// request of the user then starts from the highest token any of them
// stored, on whichever instance it lands.
//
// # Several databases
//
// One session serves every database (cluster) the handlers use: the
// driver keeps a watermark per cluster, the token carries them all, and
// the stores merge them per cluster (pgreplica.Token.Merge), so a write to
// a second database or another shard is as safe as one to the main
// database. See pgreplica.Session for the bound on clusters.
//
// For queue messages and background jobs see the sibling package
// pgreplicajob.
package pgreplicahttp
