package pgreplica_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/pgreplica/pgreplica"
)

func ExampleParseLSN() {
	a, err := pgreplica.ParseLSN("0/FFFFFF")
	if err != nil {
		panic(err)
	}
	b, _ := pgreplica.ParseLSN("0/1000000")
	fmt.Println(a < b, "0/FFFFFF" < "0/1000000") // numeric vs text order
	fmt.Println(uint64(b-a), "byte of WAL between them")

	_, err = pgreplica.ParseLSN("0x16/B374D848")
	fmt.Println(err)
	// Output:
	// true false
	// 1 byte of WAL between them
	// pgreplica: invalid LSN "0x16/B374D848": unexpected character 'x' (want X/Y with 1-8 hex digits each, e.g. 16/B374D848)
}

func ExampleLSN_String() {
	fmt.Println(pgreplica.LSN(0x16_B374D848))
	fmt.Println(pgreplica.LSN(0))
	// Output:
	// 16/B374D848
	// 0/0
}

func ExampleLSN_Scan() {
	// With a *sql.DB: db.QueryRowContext(ctx, "SELECT pg_current_wal_lsn()").Scan(&lsn)
	// Scan receives what the inner driver returns: text from pgx,
	// bytes from lib/pq, nil for NULL.
	var lsn pgreplica.LSN
	for _, src := range []any{"16/B374D848", []byte("16/b374d900"), nil} {
		if err := lsn.Scan(src); err != nil {
			panic(err)
		}
		fmt.Println(lsn)
	}
	// Output:
	// 16/B374D848
	// 16/B374D900
	// 0/0
}

func ExampleSession() {
	// Process A: the driver raises the session's watermark after each
	// write; here a token stands in for that write.
	s := pgreplica.NewSession()
	_ = s.Merge(pgreplica.Token{LSN: 0x16_B374D848, Timeline: 1})
	token := s.Token() // put it in a cookie, a header or a job payload
	fmt.Println(token)

	// Process B: fold the token into its own session; reads through a
	// context carrying it see everything process A wrote before.
	tok, err := pgreplica.ParseToken(token)
	if err != nil {
		panic(err) // a bad token from outside: log it, start a fresh session
	}
	s2 := pgreplica.NewSession()
	_ = s2.Merge(tok)
	ctx := pgreplica.WithSession(context.Background(), s2)
	fmt.Println(pgreplica.SessionFrom(ctx).LSN())

	// A lower position never lowers the watermark.
	_ = s2.Merge(pgreplica.Token{LSN: 1})
	fmt.Println(s2.LSN())
	// Output:
	// AQAAAAAWs3TYSAAAAAEAAAAAAAAAAA
	// 16/B374D848
	// 16/B374D848
}

// One session serves every database the application talks to: the
// driver keeps a watermark per cluster (system identifier), and the token
// carries them all.
func ExampleSession_clusters() {
	const orders, billing = 7449373393844797465, 7449373393844797999 // pg_control_system()
	s := pgreplica.NewSession()
	// The driver records each write for its own cluster; tokens stand in
	// for a write to each database.
	_ = s.Merge(pgreplica.Token{LSN: 0x16_B374D848, Timeline: 1, SystemID: orders})
	_ = s.Merge(pgreplica.Token{LSN: 0x3_00000100, Timeline: 1, SystemID: billing})

	tok, _ := pgreplica.ParseToken(s.Token()) // in another process
	for _, p := range tok.Positions() {
		fmt.Println(p.SystemID, p.LSN)
	}
	fmt.Println(tok.LSNFor(billing), s.LSNFor(orders))
	// Output:
	// 7449373393844797465 16/B374D848
	// 7449373393844797999 3/100
	// 3/100 16/B374D848
}

func ExampleTokenCodec() {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	codec := pgreplica.TokenCodec{
		Key: []byte("a secret of at least 32 bytes..."),
		TTL: 10 * time.Minute,
		Now: func() time.Time { return now }, // nil in production
	}
	s := pgreplica.NewSession()
	_ = s.Merge(pgreplica.Token{LSN: 0x16_B374D848, Timeline: 2, SystemID: 7449373393844797465})
	signed := codec.SessionToken(s)
	fmt.Println(len(signed), "characters")

	tok, err := codec.Decode(signed)
	fmt.Println(tok.LSN, tok.Timeline, tok.Expires, err)

	_, err = pgreplica.ParseToken(signed) // no key
	fmt.Println(err)

	forged := codec
	forged.Key = []byte("somebody else's key.............")
	_, err = codec.Decode(forged.SessionToken(s))
	fmt.Println(err)

	now = now.Add(time.Hour)
	_, err = codec.Decode(signed)
	fmt.Println(err, errors.Is(err, pgreplica.ErrBadToken))
	// Output:
	// 83 characters
	// 16/B374D848 2 2025-06-01 12:10:00 +0000 UTC <nil>
	// pgreplica: bad token: signed token needs a key
	// pgreplica: bad token: bad signature
	// pgreplica: bad token: expired true
}

// Rotating the key: every process signs with the new key and still reads
// tokens of the old one, until they have all expired.
func ExampleTokenCodec_rotation() {
	oldKey := []byte("last month's secret, 32 bytes...")
	newKey := []byte("this month's secret, 32 bytes...")
	before := pgreplica.TokenCodec{Key: oldKey}
	during := pgreplica.TokenCodec{Key: newKey, PreviousKeys: [][]byte{oldKey}, TTL: 10 * time.Minute}
	after := pgreplica.TokenCodec{Key: newKey}

	issued := before.Encode(pgreplica.Token{LSN: 0x2A})
	tok, err := during.Decode(issued)
	fmt.Println(tok.LSN, err)
	_, err = after.Decode(issued)
	fmt.Println(err)
	tok, err = after.Decode(during.Encode(tok)) // re-signed with the new key
	fmt.Println(tok.LSN, err)
	// Output:
	// 0/2A <nil>
	// pgreplica: bad token: bad signature
	// 0/2A <nil>
}

// A token from outside, once decoded, is checked against the cluster
// before it is trusted: one that claims a position the primary has not
// written, or that names only another cluster, is refused. The helpers
// (pgreplicahttp, pgreplicagrpc, pgreplicajob) take the check as their
// Options.Check. (Compile-only: it needs a cluster.)
func ExampleTokenCheck() {
	db, err := sql.Open("pgreplica", "postgres://app@db1,db2,db3/shop")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	codec := pgreplica.TokenCodec{Key: []byte("a secret of at least 32 bytes...")}
	check := pgreplica.TokenCheck(db)

	fromCookie := "..." // as a client sent it
	ctx := context.Background()
	tok, err := codec.Decode(fromCookie)
	if err == nil {
		err = check(ctx, tok)
	}
	if errors.Is(err, pgreplica.ErrBadToken) {
		tok = pgreplica.Token{} // read as a client without a token would
	}
	ctx = pgreplica.WithToken(ctx, tok)
	_ = ctx // db.QueryRowContext(ctx, ...)
}

func ExampleParseToken() {
	for _, in := range []string{
		"AQAAAAAWs3TYSAAAAAEAAAAAAAAAAA",
		"",
		"not a token!",
		"AwAAAAAWs3TYSAAAAAEAAAAAAAAAAA",
		"AQAAAAAWs3TYSAAAAAEAAAAAAAAA",
	} {
		tok, err := pgreplica.ParseToken(in)
		if err != nil {
			fmt.Println(errors.Is(err, pgreplica.ErrBadToken), err)
			continue
		}
		fmt.Println(tok.LSN, tok.Timeline)
	}
	// Output:
	// 16/B374D848 1
	// true pgreplica: bad token: empty
	// true pgreplica: bad token: garbled
	// true pgreplica: bad token: unknown version
	// true pgreplica: bad token: truncated
}

// An HTTP middleware that gives every request of a browser read-your-writes
// across requests, servers and processes, with a signed cookie.
func ExampleWithSession_httpMiddleware() {
	codec := pgreplica.TokenCodec{Key: []byte("a secret of at least 32 bytes..."), TTL: 10 * time.Minute}
	const cookie = "pgr"

	middleware := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s := pgreplica.NewSession()
			if c, err := r.Cookie(cookie); err == nil {
				if tok, err := codec.Decode(c.Value); err == nil {
					_ = s.Merge(tok)
				} // a bad or expired token: start a fresh session, never fail the request
			}
			next.ServeHTTP(w, r.WithContext(pgreplica.WithSession(r.Context(), s)))
		})
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := pgreplica.SessionFrom(r.Context())
		// db.ExecContext(r.Context(), "UPDATE ...") would raise the
		// watermark here; a token stands in for that write.
		if r.Method == http.MethodPost {
			_ = s.Merge(pgreplica.Token{LSN: 0x16_B374D848})
		}
		// Hand the (possibly raised) watermark back before writing the body.
		http.SetCookie(w, &http.Cookie{Name: cookie, Value: codec.SessionToken(s), HttpOnly: true, Path: "/"})
		fmt.Fprintln(w, "must see", s.LSN())
	})
	srv := middleware(handler)

	post := httptest.NewRecorder()
	srv.ServeHTTP(post, httptest.NewRequest(http.MethodPost, "/profile", nil))
	fmt.Print(post.Body)

	get := httptest.NewRequest(http.MethodGet, "/profile", nil)
	for _, c := range post.Result().Cookies() {
		get.AddCookie(c)
	}
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, get)
	fmt.Print(rec.Body)

	forged := httptest.NewRequest(http.MethodGet, "/profile", nil)
	forged.AddCookie(&http.Cookie{Name: cookie, Value: "AQAAAAAWs3TYSAAAAAEAAAAAAAAAAA"})
	rec = httptest.NewRecorder()
	srv.ServeHTTP(rec, forged)
	fmt.Print(rec.Body)
	// Output:
	// must see 16/B374D848
	// must see 16/B374D848
	// must see 0/0
}

// A queue producer stores the position of its write in the job; the worker
// reads with that position as a minimum.
func ExampleWithToken() {
	producer := pgreplica.NewSession()
	_ = producer.Merge(pgreplica.Token{LSN: 0x2A_00000100}) // as after db.ExecContext(...)
	payload := map[string]string{"order": "1042", "pgr": producer.Token()}

	// In the worker:
	ctx := context.Background()
	if tok, err := pgreplica.ParseToken(payload["pgr"]); err == nil {
		ctx = pgreplica.WithToken(ctx, tok)
	}
	// db.QueryRowContext(ctx, "SELECT ... WHERE id = $1", payload["order"])
	// now reads a replica that replayed 2A/100, or the primary.
	_ = ctx
	fmt.Println("worker reads at or after", producer.LSN())
	// Output:
	// worker reads at or after 2A/100
}

// Each requirement is a context; derive one per call. The precedence is
// documented on WithSession.
func ExampleWithPrimary() {
	var db *sql.DB // sql.Open("pgreplica", "postgres://app@db1,db2,db3/shop")
	check := func(ctx context.Context) error {
		// A read that decides a write runs on the primary; better still,
		// in the same read-write transaction as the write.
		var stock int
		return db.QueryRowContext(pgreplica.WithPrimary(ctx), "SELECT stock FROM items WHERE id = $1", 7).Scan(&stock)
	}
	report := func(ctx context.Context) error {
		// A dashboard tolerates 5 s of lag but must never load the
		// primary: with no replica that fresh it fails with
		// ErrNoFreshReplica.
		ctx = pgreplica.WithFallback(pgreplica.WithMaxStaleness(ctx, 5*time.Second), pgreplica.FallbackError)
		_, err := db.QueryContext(ctx, "SELECT count(*) FROM orders")
		if errors.Is(err, pgreplica.ErrNoFreshReplica) {
			return nil // show the cached figure instead
		}
		return err
	}
	feed := func(ctx context.Context) error {
		// Any healthy replica, even behind this process's own writes.
		_, err := db.QueryContext(pgreplica.WithEventual(ctx), "SELECT * FROM news LIMIT 20")
		return err
	}
	_, _, _ = check, report, feed
}

// A payment must survive a failover: its INSERT returns only once a
// replica has it on disk. Any other write of the handle does not wait.
func ExampleWithReplicated() {
	db, err := sql.Open("pgreplica", "postgres://app@db1,db2,db3/shop")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(pgreplica.WithReplicated(context.Background(), 1), 2*time.Second)
	defer cancel()
	_, err = db.ExecContext(ctx, "INSERT INTO payments (order_id, cents) VALUES ($1, $2)", 42, 1999)
	var nr *pgreplica.NotReplicatedError
	switch {
	case errors.As(err, &nr):
		// Committed on the primary, on nr.Have replicas only: never send it again.
		fmt.Println("committed, not yet replicated:", nr.Have, "of", nr.Want)
	case err != nil:
		fmt.Println("failed:", err)
	}
}
