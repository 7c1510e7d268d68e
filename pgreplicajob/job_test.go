package pgreplicajob_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/pgreplicajob"
)

// written returns a context whose session saw a write at lsn.
func written(t *testing.T, lsn pgreplica.LSN) context.Context {
	t.Helper()
	s := pgreplica.NewSession()
	if err := s.Merge(pgreplica.Token{LSN: lsn, Timeline: 1}); err != nil {
		t.Fatal(err)
	}
	return pgreplica.WithSession(context.Background(), s)
}

func TestRoundTrip(t *testing.T) {
	tok := pgreplicajob.Inject(written(t, 0x3_0000AB00))
	if tok == "" {
		t.Fatal("no token from a session that wrote")
	}
	ctx, err := pgreplicajob.Extract(context.Background(), tok)
	if err != nil {
		t.Fatal(err)
	}
	s := pgreplica.SessionFrom(ctx)
	if s.LSN() != 0x3_0000AB00 {
		t.Fatalf("worker session at %v", s.LSN())
	}
	// The worker's own writes advance its session, so a follow-up job
	// carries them too.
	s.Merge(pgreplica.Token{LSN: 0x3_0000FF00})
	next, _ := pgreplica.ParseToken(pgreplicajob.Inject(ctx))
	if next.LSN != 0x3_0000FF00 {
		t.Fatalf("chained token at %v", next.LSN)
	}
}

func TestNoToken(t *testing.T) {
	bg := context.Background()
	if tok := pgreplicajob.Inject(bg); tok != "" {
		t.Fatalf("token %q without a session", tok)
	}
	if tok := pgreplicajob.Inject(pgreplica.WithSession(bg, pgreplica.NewSession())); tok != "" {
		t.Fatalf("token %q from a session with no position", tok)
	}
	ctx, err := pgreplicajob.Extract(bg, "")
	if err != nil || ctx != bg {
		t.Fatalf("Extract(\"\") = %v, %v; want ctx unchanged", ctx, err)
	}
	ctx, err = pgreplicajob.ExtractHeader(bg, nil)
	if err != nil || ctx != bg {
		t.Fatalf("ExtractHeader(nil) = %v, %v", ctx, err)
	}
	h := map[string]string{}
	pgreplicajob.InjectHeader(bg, h)
	if len(h) != 0 {
		t.Fatalf("InjectHeader without a token wrote %v", h)
	}
}

func TestExtractMergesIntoExistingSession(t *testing.T) {
	s := pgreplica.NewSession()
	s.Merge(pgreplica.Token{LSN: 500})
	ctx := pgreplica.WithSession(context.Background(), s)
	out, err := pgreplicajob.Extract(ctx, pgreplicajob.Inject(written(t, 100)))
	if err != nil || pgreplica.SessionFrom(out) != s || s.LSN() != 500 {
		t.Fatalf("session %p (want %p) at %v, %v", pgreplica.SessionFrom(out), s, s.LSN(), err)
	}
}

func TestSignedCarrierAndHeaders(t *testing.T) {
	c := pgreplicajob.Carrier{Codec: pgreplica.TokenCodec{Key: bytes.Repeat([]byte{9}, 32), TTL: time.Hour}, Header: "x-rw"}
	h := map[string]string{"other": "kept"}
	c.InjectHeader(written(t, 77), h)
	if h["x-rw"] == "" || h["other"] != "kept" || len(h) != 2 {
		t.Fatalf("headers %v", h)
	}
	ctx, err := c.ExtractHeader(context.Background(), h)
	if err != nil || pgreplica.SessionFrom(ctx).LSN() != 77 {
		t.Fatalf("signed header round trip: %v", err)
	}

	bg := context.Background()
	for name, carrier := range map[string]pgreplicajob.Carrier{
		"wrong key": {Codec: pgreplica.TokenCodec{Key: bytes.Repeat([]byte{8}, 32)}, Header: "x-rw"},
		"no key":    {Header: "x-rw"},
	} {
		got, err := carrier.ExtractHeader(bg, h)
		if !errors.Is(err, pgreplica.ErrBadToken) || got != bg {
			t.Errorf("%s: %v, ctx changed %v", name, err, got != bg)
		}
	}
	if _, err := pgreplicajob.Extract(bg, "garbage!"); !errors.Is(err, pgreplica.ErrBadToken) {
		t.Errorf("garbage: %v", err)
	}
}

// TestSeveralClusters: a producer that wrote to two databases (clusters)
// hands both positions to the worker, whose reads on each cluster wait for
// that cluster's write; merging into a worker session of another cluster
// keeps both.
func TestSeveralClusters(t *testing.T) {
	const a, b = 111, 222
	producer := pgreplica.NewSession()
	producer.Merge(pgreplica.Token{LSN: 0x9_00000000, SystemID: a}) // as the driver records writes
	producer.Merge(pgreplica.Token{LSN: 0x500, SystemID: b})
	tok := pgreplicajob.Inject(pgreplica.WithSession(context.Background(), producer))

	worker := pgreplica.NewSession()
	worker.Merge(pgreplica.Token{LSN: 5, SystemID: 333})
	ctx := pgreplica.WithSession(context.Background(), worker)
	got, err := pgreplicajob.Extract(ctx, tok)
	if err != nil || pgreplica.SessionFrom(got) != worker {
		t.Fatalf("Extract: %v", err)
	}
	for sysid, want := range map[uint64]pgreplica.LSN{a: 0x9_00000000, b: 0x500, 333: 5} {
		if worker.LSNFor(sysid) != want {
			t.Errorf("worker session on cluster %d at %v, want %v", sysid, worker.LSNFor(sysid), want)
		}
	}

	// A session whose first cluster has no position but another has
	// still injects a token.
	s := pgreplica.NewSession()
	s.Merge(pgreplica.Token{SystemID: a, Others: []pgreplica.Position{{SystemID: b, LSN: 7}}})
	if tok := pgreplicajob.Inject(pgreplica.WithSession(context.Background(), s)); tok == "" {
		t.Fatal("no token for a write on the second cluster")
	}
}
