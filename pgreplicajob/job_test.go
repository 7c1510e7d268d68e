package pgreplicajob_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/pgreplicajob"
)

// dev is a Carrier of unsigned tokens, which tests can read with
// pgreplica.ParseToken.
var dev = func() *pgreplicajob.Carrier {
	c, err := pgreplicajob.New(pgreplicajob.Options{Unsigned: true})
	if err != nil {
		panic(err)
	}
	return c
}()

// carrier returns the Carrier of opts, failing t on an error.
func carrier(t *testing.T, opts pgreplicajob.Options) *pgreplicajob.Carrier {
	t.Helper()
	c, err := pgreplicajob.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

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
	tok := dev.Inject(written(t, 0x3_0000AB00))
	if tok == "" {
		t.Fatal("no token from a session that wrote")
	}
	ctx, err := dev.Extract(context.Background(), tok)
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
	next, _ := pgreplica.ParseToken(dev.Inject(ctx))
	if next.LSN != 0x3_0000FF00 {
		t.Fatalf("chained token at %v", next.LSN)
	}
}

func TestNoToken(t *testing.T) {
	bg := context.Background()
	if tok := dev.Inject(bg); tok != "" {
		t.Fatalf("token %q without a session", tok)
	}
	if tok := dev.Inject(pgreplica.WithSession(bg, pgreplica.NewSession())); tok != "" {
		t.Fatalf("token %q from a session with no position", tok)
	}
	ctx, err := dev.Extract(bg, "")
	if err != nil || ctx != bg {
		t.Fatalf("Extract(\"\") = %v, %v; want ctx unchanged", ctx, err)
	}
	ctx, err = dev.ExtractHeader(bg, nil)
	if err != nil || ctx != bg {
		t.Fatalf("ExtractHeader(nil) = %v, %v", ctx, err)
	}
	h := map[string]string{}
	dev.InjectHeader(bg, h)
	if len(h) != 0 {
		t.Fatalf("InjectHeader without a token wrote %v", h)
	}
}

func TestExtractMergesIntoExistingSession(t *testing.T) {
	s := pgreplica.NewSession()
	s.Merge(pgreplica.Token{LSN: 500})
	ctx := pgreplica.WithSession(context.Background(), s)
	out, err := dev.Extract(ctx, dev.Inject(written(t, 100)))
	if err != nil || pgreplica.SessionFrom(out) != s || s.LSN() != 500 {
		t.Fatalf("session %p (want %p) at %v, %v", pgreplica.SessionFrom(out), s, s.LSN(), err)
	}
}

func TestSignedCarrierAndHeaders(t *testing.T) {
	key := bytes.Repeat([]byte{9}, 32)
	c := carrier(t, pgreplicajob.Options{Codec: pgreplica.TokenCodec{Key: key, TTL: time.Hour}, Header: "x-rw"})
	h := map[string]string{"other": "kept"}
	c.InjectHeader(written(t, 77), h)
	if h["x-rw"] == "" || h["other"] != "kept" || len(h) != 2 {
		t.Fatalf("headers %v", h)
	}
	ctx, err := c.ExtractHeader(context.Background(), h)
	if err != nil || pgreplica.SessionFrom(ctx).LSN() != 77 {
		t.Fatalf("signed header round trip: %v", err)
	}
	// Rotated: the new key signs, the old one still reads.
	rotated := carrier(t, pgreplicajob.Options{Codec: pgreplica.TokenCodec{Key: bytes.Repeat([]byte{10}, 32), PreviousKeys: [][]byte{key}}, Header: "x-rw"})
	if ctx, err := rotated.ExtractHeader(context.Background(), h); err != nil || pgreplica.SessionFrom(ctx).LSN() != 77 {
		t.Fatalf("a token of the previous key: %v", err)
	}
	if _, err := c.Extract(context.Background(), rotated.Inject(written(t, 5))); !errors.Is(err, pgreplica.ErrBadToken) {
		t.Fatalf("a token of the new key read with the old one only: %v", err)
	}

	bg := context.Background()
	for name, carrier := range map[string]*pgreplicajob.Carrier{
		"wrong key": carrier(t, pgreplicajob.Options{Codec: pgreplica.TokenCodec{Key: bytes.Repeat([]byte{8}, 32)}, Header: "x-rw"}),
		"unsigned":  carrier(t, pgreplicajob.Options{Unsigned: true, Header: "x-rw"}),
	} {
		got, err := carrier.ExtractHeader(bg, h)
		if !errors.Is(err, pgreplica.ErrBadToken) || got != bg {
			t.Errorf("%s: %v, ctx changed %v", name, err, got != bg)
		}
	}
	if _, err := dev.Extract(bg, "garbage!"); !errors.Is(err, pgreplica.ErrBadToken) {
		t.Errorf("garbage: %v", err)
	}
}

// TestNewNeedsKey: without a key New fails with ErrNoTokenKey unless
// Unsigned says so; the zero Carrier carries nothing.
func TestNewNeedsKey(t *testing.T) {
	if c, err := pgreplicajob.New(pgreplicajob.Options{}); c != nil || !errors.Is(err, pgreplica.ErrNoTokenKey) {
		t.Fatalf("New without a key: %v, %v", c, err)
	}
	if _, err := pgreplicajob.New(pgreplicajob.Options{Unsigned: true, Codec: pgreplica.TokenCodec{Key: []byte("k")}}); err == nil || errors.Is(err, pgreplica.ErrNoTokenKey) {
		t.Fatalf("New with a key and Unsigned: %v", err)
	}
	var zero pgreplicajob.Carrier
	if tok := zero.Inject(written(t, 9)); tok != "" {
		t.Fatalf("the zero Carrier injected %q", tok)
	}
	if _, err := zero.Extract(context.Background(), dev.Inject(written(t, 9))); !errors.Is(err, pgreplica.ErrNoTokenKey) {
		t.Fatalf("the zero Carrier's Extract: %v", err)
	}
}

// TestCheckRefuses: a token Options.Check refuses is a bad token, and the
// context comes back unchanged.
func TestCheckRefuses(t *testing.T) {
	refuse := fmt.Errorf("%w: refused by the check", pgreplica.ErrBadToken)
	var checked pgreplica.Token
	c := carrier(t, pgreplicajob.Options{Unsigned: true, Check: func(_ context.Context, tok pgreplica.Token) error {
		checked = tok
		if tok.LSN > 100 {
			return refuse
		}
		return nil
	}})
	bg := context.Background()
	if got, err := c.Extract(bg, c.Inject(written(t, 1000))); !errors.Is(err, refuse) || got != bg || checked.LSN != 1000 {
		t.Fatalf("refused token: %v (checked %v)", err, checked.LSN)
	}
	if got, err := c.Extract(bg, c.Inject(written(t, 50))); err != nil || pgreplica.SessionFrom(got).LSN() != 50 {
		t.Fatalf("accepted token: %v", err)
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
	tok := dev.Inject(pgreplica.WithSession(context.Background(), producer))

	worker := pgreplica.NewSession()
	worker.Merge(pgreplica.Token{LSN: 5, SystemID: 333})
	ctx := pgreplica.WithSession(context.Background(), worker)
	got, err := dev.Extract(ctx, tok)
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
	if tok := dev.Inject(pgreplica.WithSession(context.Background(), s)); tok == "" {
		t.Fatal("no token for a write on the second cluster")
	}
}
