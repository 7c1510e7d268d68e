package pgreplicahttptest

import (
	"bytes"
	"database/sql"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration/itest"
	"github.com/pgreplica/pgreplica/pgreplicahttp"
)

// clusterFacts returns the cluster's system identifier and the primary's
// insert position now.
func clusterFacts(t *testing.T) (sysid uint64, now pgreplica.LSN) {
	t.Helper()
	ctx := ctxFor(t)
	s, err := cluster.QueryString(ctx, cluster.Primary(), "SELECT system_identifier::text FROM pg_control_system()")
	if err != nil {
		t.Fatal(err)
	}
	if sysid, err = strconv.ParseUint(s, 10, 64); err != nil {
		t.Fatal(err)
	}
	s, err = cluster.QueryString(ctx, cluster.Primary(), "SELECT pg_current_wal_insert_lsn()::text")
	if err != nil {
		t.Fatal(err)
	}
	if now, err = pgreplica.ParseLSN(s); err != nil {
		t.Fatal(err)
	}
	return sysid, now
}

// terabyte is how far ahead of the primary a far-future token claims to be.
const terabyte = 1 << 40

// badTokens are cookies a client may send that the middleware must refuse,
// given the cluster's system identifier and the primary's position.
func badTokens(t *testing.T, codec pgreplica.TokenCodec, sysid uint64, now pgreplica.LSN) map[string]string {
	t.Helper()
	valid := codec.Encode(pgreplica.Token{LSN: now, SystemID: sysid})
	tampered := []byte(valid)
	tampered[len(tampered)/2] ^= 'A' ^ 'B' // still base64url, another byte
	if tampered[len(tampered)/2] == valid[len(valid)/2] {
		t.Fatal("tampering changed nothing")
	}
	expired := codec
	expired.TTL, expired.Now = time.Minute, func() time.Time { return time.Now().Add(-time.Hour) }
	return map[string]string{
		"forged (another key)":   pgreplica.TokenCodec{Key: bytes.Repeat([]byte("x"), 32)}.Encode(pgreplica.Token{LSN: now, SystemID: sysid}),
		"unsigned":               pgreplica.TokenCodec{}.Encode(pgreplica.Token{LSN: now + terabyte, SystemID: sysid}),
		"tampered":               string(tampered),
		"expired":                expired.Encode(pgreplica.Token{LSN: now, SystemID: sysid}),
		"another cluster":        codec.Encode(pgreplica.Token{LSN: now, SystemID: sysid + 1}),
		"oversized":              strings.Repeat("A", 299),
		"far future":             codec.Encode(pgreplica.Token{LSN: now + terabyte, SystemID: sysid}),
		"far future, no cluster": codec.Encode(pgreplica.Token{LSN: now + terabyte}),
		"highest LSN":            codec.Encode(pgreplica.Token{LSN: ^pgreplica.LSN(0), SystemID: sysid}),
	}
}

// servedBy is a handler that reads which server answered and whether it is
// a replica, with the request's context.
func servedBy(t *testing.T, db *sql.DB) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var port int
		if err := db.QueryRowContext(r.Context(), "SELECT inet_server_port()").Scan(&port); err != nil {
			t.Errorf("read: %v", err)
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("X-Served-By", strconv.Itoa(port))
	})
}

// TestBadTokensRefused: forged, unsigned, tampered, expired, another
// cluster's, oversized and far-future tokens are refused at the edge:
// with RejectBadToken a 400; by default the cookie is deleted and the
// request reads a replica as a client without a token would, at once (a
// far-future position is never waited on). A token of the primary's
// position, and one of a write made a moment ago outside this process,
// pass.
func TestBadTokensRefused(t *testing.T) {
	db := openDB(t)
	codec := pgreplica.TokenCodec{Key: testKey, TTL: time.Minute}
	check := pgreplica.TokenCheck(db)
	strict := httptest.NewTLSServer(pgreplicahttp.Middleware(pgreplicahttp.Options{
		Codec: codec, Check: check, BadToken: pgreplicahttp.RejectBadToken,
	})(servedBy(t, db)))
	defer strict.Close()
	lenient := httptest.NewTLSServer(pgreplicahttp.Middleware(pgreplicahttp.Options{
		Codec: codec, Check: check,
	})(servedBy(t, db)))
	defer lenient.Close()
	if err := db.PingContext(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	sysid, now := clusterFacts(t)
	cookie := func(v string) *http.Cookie { return &http.Cookie{Name: pgreplicahttp.DefaultCookieName, Value: v} }

	for name, v := range badTokens(t, codec, sysid, now) {
		p := do(t, anonymous(strict), http.MethodGet, strict.URL, "", nil, cookie(v))
		if p.resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s, RejectBadToken: %s, want 400", name, p.resp.Status)
		}
		p = do(t, anonymous(lenient), http.MethodGet, lenient.URL, "", nil, cookie(v))
		if p.resp.StatusCode != http.StatusOK || !isReplica(nodeOf(t, p.resp)) {
			t.Errorf("%s, IgnoreBadToken: %s from node %d, want a replica", name, p.resp.Status, nodeOf(t, p.resp))
		}
		if c := cookieOf(p.resp); c == nil || c.MaxAge >= 0 {
			t.Errorf("%s, IgnoreBadToken: the bad cookie was not deleted (%v)", name, c)
		}
	}

	// Good tokens pass, the one of a write this process does not know of
	// included: written outside pgreplica, after every position it has.
	good := map[string]string{"the primary's position": codec.Encode(pgreplica.Token{LSN: now, SystemID: sysid})}
	table := itemsTable(t, db)
	if err := cluster.Exec(ctxFor(t), cluster.Primary(), "INSERT INTO "+table+" (v) VALUES ('elsewhere')"); err != nil {
		t.Fatal(err)
	}
	_, then := clusterFacts(t)
	good["a write elsewhere"] = codec.Encode(pgreplica.Token{LSN: then, SystemID: sysid})
	for name, v := range good {
		if p := do(t, anonymous(strict), http.MethodGet, strict.URL, "", nil, cookie(v)); p.resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %s, want 200", name, p.resp.Status)
		}
	}
}

// cookieOf returns the response's token cookie, or nil.
func cookieOf(resp *http.Response) *http.Cookie {
	for _, ck := range resp.Cookies() {
		if ck.Name == pgreplicahttp.DefaultCookieName {
			return ck
		}
	}
	return nil
}

// TestForgedTokensCostOthersNothing: while clients send far-future tokens
// signed with the right key (a leaked key, or an unsigned deployment),
// a user who saves and is redirected sees each write, no read falls back
// to the primary, and the forged requests are served by replicas: at the
// edge (Check refuses the token) and, without Check, by the router (the
// position, ahead of the primary's, is lowered to it). The wait budget is
// long (2 s), so that a read that waited for a forged position would
// show, and an honest read on a loaded machine waits rather than falls
// back.
func TestForgedTokensCostOthersNothing(t *testing.T) {
	for _, mode := range []string{"edge", "router"} {
		t.Run(mode, func(t *testing.T) {
			cluster.Need(t)
			db, c := itest.Open(t, cluster.DSN()+"&application_name=pgreplicahttp_test&pgreplica_wait_budget=2s")
			table := itemsTable(t, db)
			codec := pgreplica.TokenCodec{Key: testKey, TTL: time.Minute}
			opts := pgreplicahttp.Options{Codec: codec}
			if mode == "edge" {
				opts.Check = pgreplica.TokenCheck(db)
			}
			app := itemsApp(t, db, table)
			app.Handle("GET /who", servedBy(t, db))
			srv := httptest.NewTLSServer(pgreplicahttp.Middleware(opts)(app))
			defer srv.Close()
			if err := cluster.WaitCaughtUp(ctxFor(t)); err != nil {
				t.Fatal(err)
			}
			sysid, now := clusterFacts(t)
			forged := &http.Cookie{Name: pgreplicahttp.DefaultCookieName,
				Value: codec.Encode(pgreplica.Token{LSN: now + terabyte, SystemID: sysid})}
			before := c.Stats()

			const forgers, honest = 8, 20
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var mu sync.Mutex
			var forgedReads, forgedOnPrimary int
			for range forgers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					cl := anonymous(srv)
					for {
						select {
						case <-stop:
							return
						default:
						}
						p := do(t, cl, http.MethodGet, srv.URL+"/who", "", nil, forged)
						mu.Lock()
						forgedReads++
						if !isReplica(nodeOf(t, p.resp)) {
							forgedOnPrimary++
						}
						mu.Unlock()
					}
				}()
			}
			b := browser(t, srv)
			var slowest time.Duration
			for i := range honest {
				start := time.Now()
				v := "v" + strconv.Itoa(i)
				if p := create(t, b, srv, "", v); p.resp.StatusCode != http.StatusOK || p.body != v {
					t.Errorf("save %d, then its page: %s %q", i, p.resp.Status, p.body)
				}
				slowest = max(slowest, time.Since(start))
			}
			close(stop)
			wg.Wait()
			after := c.Stats()
			t.Logf("%d forged reads, %d on the primary; slowest save and redirect %v; fallbacks %d, recent-write primary reads %d",
				forgedReads, forgedOnPrimary, slowest, after.FallbackReads-before.FallbackReads, after.RecentWriteReads-before.RecentWriteReads)
			if forgedReads == 0 || forgedOnPrimary != 0 {
				t.Errorf("%d of %d forged reads ran on the primary, want none", forgedOnPrimary, forgedReads)
			}
			if n := after.FallbackReads - before.FallbackReads; n != 0 {
				t.Errorf("%d reads fell back to the primary, want none", n)
			}
			if slowest >= 2*time.Second {
				t.Errorf("a save and its page took %v: as long as the wait budget", slowest)
			}
		})
	}
}
