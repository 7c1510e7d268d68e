package bench

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/pgreplicahttp"
)

// Honest sessions and clients that forge far-future tokens, in
// BenchmarkForgedTokens.
const (
	forgedHonest  = 8
	forgedForgers = 32
	// forgedAhead is how far ahead of the primary a forged token claims
	// to be: a terabyte.
	forgedAhead = 1 << 40
)

// forgerPace is the least time between two reads of one forger
// (PGREPLICA_BENCH_FORGER_PACE, a Go duration; default 150ms, about the
// rate a forger achieved when each of its reads waited out the default
// wait budget; 0 sends the next read as soon as the last one answered).
func forgerPace(tb testing.TB) time.Duration {
	s := os.Getenv("PGREPLICA_BENCH_FORGER_PACE")
	if s == "" {
		return 150 * time.Millisecond
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// BenchmarkForgedTokens measures what clients that forge far-future
// tokens cost honest sessions: forgedHonest sessions each write a row and
// read it back (read-your-writes: the read needs the write), b.N times,
// and the reads are timed; beside them, in the "forged" runs,
// forgedForgers clients read with a token a terabyte ahead of the
// primary. It runs in process (WithToken) and through pgreplicahttp's
// middleware, with the token check at the edge (Check:
// pgreplica.TokenCheck) and without it (the router's rule alone), each
// "alone" (no forgers) and "forged". Reported: the honest reads' p50 and
// p99 (ms), honest reads/s, forged reads/s, and, from the connector's
// Stats, the reads that fell back to the primary (fallbacks), the reads
// sent there as too recent for a replica (recent-write) and the most
// fallback slots held at once (slots-peak).
//
//	go test -run '^$' -bench ForgedTokens -benchtime 300x ./integration/bench
func BenchmarkForgedTokens(b *testing.B) {
	cluster.Need(b)
	createTable(b, "forged")
	for _, door := range []string{"inprocess", "http-edge", "http-router"} {
		for _, forged := range []bool{false, true} {
			name := door + "/alone"
			if forged {
				name = door + "/forged"
			}
			b.Run(name, func(b *testing.B) { forgedTokens(b, door, forged) })
		}
	}
}

// forgedWorld is one run's handle, and the reads of each kind.
type forgedWorld struct {
	db        *sql.DB
	c         *pgreplica.Connector
	forged    pgreplica.Token
	codec     pgreplica.TokenCodec
	srv       *httptest.Server // nil in process
	selectSQL string
	insertSQL string
}

func forgedTokens(b *testing.B, door string, forged bool) {
	ctx := context.Background()
	dsn := clusterEndpoints().clusterDSN() + "&application_name=pgreplica_bench_forged"
	w := &forgedWorld{
		db:        openDB(b, pgreplica.DriverName, dsn),
		codec:     pgreplica.TokenCodec{Key: []byte("a benchmark key of 32 bytes.....")},
		selectSQL: "SELECT v FROM forged WHERE id = $1",
		insertSQL: "INSERT INTO forged (v) VALUES ('honest') RETURNING id",
	}
	var err error
	if w.c, err = pgreplica.ConnectorOf(ctx, w.db); err != nil {
		b.Fatal(err)
	}
	if err := cluster.WaitCaughtUp(ctx); err != nil {
		b.Fatal(err)
	}
	sysid, now := forgedClusterFacts(b)
	w.forged = pgreplica.Token{LSN: now + forgedAhead, SystemID: sysid}
	if door != "inprocess" {
		opts := pgreplicahttp.Options{Codec: w.codec, CookieInsecure: true}
		if door == "http-edge" {
			opts.Check = pgreplica.TokenCheck(w.db)
		}
		w.srv = httptest.NewServer(pgreplicahttp.Middleware(opts)(w.app(b)))
		b.Cleanup(w.srv.Close)
	}

	stop := make(chan struct{})
	var forgers sync.WaitGroup
	var forgedMu sync.Mutex
	var forgedLat []time.Duration
	var started sync.WaitGroup // each forger has read once: it is under way
	if forged {
		pace := forgerPace(b)
		started.Add(forgedForgers)
		for range forgedForgers {
			forgers.Add(1)
			go func() {
				defer forgers.Done()
				read := w.forgedReader(b)
				first := true
				for {
					select {
					case <-stop:
						return
					default:
					}
					start := time.Now()
					err := read()
					if first {
						started.Done()
						first = false
					}
					if err != nil {
						b.Error(err)
						return
					}
					d := time.Since(start)
					forgedMu.Lock()
					forgedLat = append(forgedLat, d)
					forgedMu.Unlock()
					if d < pace {
						select {
						case <-time.After(pace - d):
						case <-stop:
							return
						}
					}
				}
			}()
		}
	}
	started.Wait()

	forgedMu.Lock()
	forgedBefore := len(forgedLat)
	forgedMu.Unlock()
	before := w.c.Stats()
	lat := make([][]time.Duration, forgedHonest)
	var honest sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for i := range forgedHonest {
		honest.Add(1)
		go func() {
			defer honest.Done()
			writeRead := w.honestSession(b)
			for range b.N {
				d, err := writeRead()
				if err != nil {
					b.Error(err)
					return
				}
				lat[i] = append(lat[i], d)
			}
		}()
	}
	honest.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	after := w.c.Stats()
	close(stop)
	forgers.Wait()

	all := slices.Concat(lat...)
	b.ReportMetric(msOf(quantileOf(all, 0.50)), "honest-p50-ms")
	b.ReportMetric(msOf(quantileOf(all, 0.99)), "honest-p99-ms")
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "honest-reads/s")
	b.ReportMetric(float64(len(forgedLat)-forgedBefore)/elapsed.Seconds(), "forged-reads/s")
	if len(forgedLat) > 0 {
		b.ReportMetric(msOf(quantileOf(forgedLat, 0.50)), "forged-p50-ms")
	}
	b.ReportMetric(float64(after.FallbackReads-before.FallbackReads), "fallbacks")
	b.ReportMetric(float64(after.RecentWriteReads-before.RecentWriteReads), "recent-write")
	b.ReportMetric(float64(after.FallbackPeak), "slots-peak")
	b.ReportMetric(0, "ns/op") // the figures above are the measure
}

// honestSession returns one honest session's operation: write a row, then
// read it back, timing the read (the GET after the POST, over HTTP).
func (w *forgedWorld) honestSession(b *testing.B) func() (time.Duration, error) {
	if w.srv == nil {
		ctx := pgreplica.WithSession(context.Background(), pgreplica.NewSession())
		return func() (time.Duration, error) {
			var id int64
			if err := w.db.QueryRowContext(ctx, w.insertSQL).Scan(&id); err != nil {
				return 0, err
			}
			start := time.Now()
			var v string
			if err := w.db.QueryRowContext(ctx, w.selectSQL, id).Scan(&v); err != nil {
				return 0, fmt.Errorf("reading back row %d: %w", id, err)
			}
			return time.Since(start), nil
		}
	}
	jar, err := cookiejar.New(nil)
	if err != nil {
		b.Fatal(err)
	}
	cl := &http.Client{Jar: jar}
	return func() (time.Duration, error) {
		resp, err := cl.Post(w.srv.URL+"/w", "text/plain", nil)
		if err != nil {
			return 0, err
		}
		id, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("POST /w: %s %s %v", resp.Status, id, err)
		}
		start := time.Now()
		resp, err = cl.Get(w.srv.URL + "/r?id=" + url.QueryEscape(string(id)))
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("GET /r?id=%s: %s", id, resp.Status)
		}
		return time.Since(start), nil
	}
}

// forgedReader returns one forger's read: with the forged token, in
// process or as a cookie.
func (w *forgedWorld) forgedReader(b *testing.B) func() error {
	if w.srv == nil {
		ctx := pgreplica.WithToken(context.Background(), w.forged)
		return func() error {
			var v string
			return w.db.QueryRowContext(ctx, w.selectSQL, 1).Scan(&v)
		}
	}
	cookie := &http.Cookie{Name: pgreplicahttp.DefaultCookieName, Value: w.codec.Encode(w.forged)}
	cl := &http.Client{}
	return func() error {
		req, err := http.NewRequest(http.MethodGet, w.srv.URL+"/r?id=1", nil)
		if err != nil {
			return err
		}
		req.AddCookie(cookie)
		resp, err := cl.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("forged GET: %s", resp.Status)
		}
		return nil
	}
}

// app is the HTTP side: POST /w inserts a row and answers its id; GET
// /r?id= reads it.
func (w *forgedWorld) app(b *testing.B) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /w", func(rw http.ResponseWriter, r *http.Request) {
		var id int64
		if err := w.db.QueryRowContext(r.Context(), w.insertSQL).Scan(&id); err != nil {
			http.Error(rw, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprint(rw, id)
	})
	mux.HandleFunc("GET /r", func(rw http.ResponseWriter, r *http.Request) {
		var v string
		err := w.db.QueryRowContext(r.Context(), w.selectSQL, r.URL.Query().Get("id")).Scan(&v)
		switch {
		case err == sql.ErrNoRows:
			http.NotFound(rw, r)
		case err != nil:
			http.Error(rw, err.Error(), http.StatusInternalServerError)
		}
	})
	return mux
}

// forgedClusterFacts returns the cluster's system identifier and the
// primary's insert position.
func forgedClusterFacts(tb testing.TB) (uint64, pgreplica.LSN) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := cluster.QueryString(ctx, cluster.Primary(), "SELECT system_identifier::text FROM pg_control_system()")
	if err != nil {
		tb.Fatal(err)
	}
	sysid, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	if err != nil {
		tb.Fatal(err)
	}
	s, err = cluster.QueryString(ctx, cluster.Primary(), "SELECT pg_current_wal_insert_lsn()::text")
	if err != nil {
		tb.Fatal(err)
	}
	lsn, err := pgreplica.ParseLSN(s)
	if err != nil {
		tb.Fatal(err)
	}
	return sysid, lsn
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// quantileOf returns the q-quantile of ds (sorted in place).
func quantileOf(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}
