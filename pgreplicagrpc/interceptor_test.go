package pgreplicagrpc_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/pgreplicagrpc"
	"github.com/pgreplica/pgreplica/pgreplicagrpc/internal/testservice"
)

var testKey = bytes.Repeat([]byte("k"), 32)

const key = pgreplicagrpc.DefaultMetadataKey

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func serverOpts(o pgreplicagrpc.Options) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(pgreplicagrpc.UnaryServerInterceptor(o)),
		grpc.ChainStreamInterceptor(pgreplicagrpc.StreamServerInterceptor(o)),
	}
}

func dialOpts(o pgreplicagrpc.Options) []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(pgreplicagrpc.UnaryClientInterceptor(o)),
		grpc.WithChainStreamInterceptor(pgreplicagrpc.StreamClientInterceptor(o)),
	}
}

// serve starts a server with the interceptors of srv and returns a client
// with those of cli.
func serve(t *testing.T, h *testservice.Handlers, srv, cli pgreplicagrpc.Options) *grpc.ClientConn {
	return testservice.Serve(t, h, serverOpts(srv), dialOpts(cli)...)
}

// session returns a session that requires lsn.
func session(t *testing.T, lsn pgreplica.LSN) *pgreplica.Session {
	s := pgreplica.NewSession()
	if lsn != 0 {
		if err := s.Merge(pgreplica.Token{LSN: lsn}); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// advance stands in for the handler's database work: the driver raises
// the session's watermark after a replica read (a write also counts in
// Session.WriteCount, which only the driver can do; see the cluster tests).
func advance(ctx context.Context, lsn pgreplica.LSN) {
	pgreplica.SessionFrom(ctx).Merge(pgreplica.Token{LSN: lsn})
}

// tokenLSN decodes the single token of md under key.
func tokenLSN(t *testing.T, c pgreplica.TokenCodec, md metadata.MD) (pgreplica.Token, bool) {
	t.Helper()
	vs := md.Get(key)
	switch len(vs) {
	case 0:
		return pgreplica.Token{}, false
	case 1:
	default:
		t.Fatalf("%d tokens in %v", len(vs), md)
	}
	tok, err := c.Decode(vs[0])
	if err != nil {
		t.Fatalf("token %q: %v", vs[0], err)
	}
	return tok, true
}

// TestUnaryRoundTrip: the server's handler sees the client session's
// position, and the client session gets the server's back, signed and
// expiring both ways.
func TestUnaryRoundTrip(t *testing.T) {
	codec := pgreplica.TokenCodec{Key: testKey, TTL: time.Minute}
	opts := pgreplicagrpc.Options{Codec: codec, WriteBack: pgreplicagrpc.WriteBackAlways}
	var seen pgreplica.LSN
	var reqTok pgreplica.Token
	cc := serve(t, &testservice.Handlers{Unary: func(ctx context.Context, req string) (string, error) {
		seen = pgreplica.SessionFrom(ctx).LSN()
		md, _ := metadata.FromIncomingContext(ctx)
		reqTok, _ = tokenLSN(t, codec, md)
		advance(ctx, 0x5_00000010)
		return "ok", nil
	}}, opts, opts)

	s := session(t, 0x100)
	var header, trailer metadata.MD
	if _, err := testservice.Unary(pgreplica.WithSession(ctxFor(t), s), cc, "x", grpc.Header(&header), grpc.Trailer(&trailer)); err != nil {
		t.Fatal(err)
	}
	if seen != 0x100 {
		t.Fatalf("handler saw %v, want 0/100", seen)
	}
	if reqTok.LSN != 0x100 || reqTok.Expires.IsZero() {
		t.Fatalf("request token %+v: want signed, expiring, at 0/100", reqTok)
	}
	if got := s.LSN(); got != 0x5_00000010 {
		t.Fatalf("client session at %v after the call, want 5/10", got)
	}
	// The token comes back in the header (unary: it had not left yet).
	tok, ok := tokenLSN(t, codec, header)
	if !ok || tok.LSN != 0x5_00000010 || tok.Expires.IsZero() {
		t.Fatalf("response header token %+v (%v)", tok, ok)
	}
	if _, ok := tokenLSN(t, codec, trailer); ok {
		t.Fatalf("token in the trailer too: %v", trailer)
	}
}

// TestNoSessionNoToken: a call without a session passes through; a session
// that requires nothing sends no token; the handler gets a session anyway.
func TestNoSessionNoToken(t *testing.T) {
	var got []metadata.MD
	var handlerSession *pgreplica.Session
	cc := serve(t, &testservice.Handlers{Unary: func(ctx context.Context, req string) (string, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		got = append(got, md)
		handlerSession = pgreplica.SessionFrom(ctx)
		return "", nil
	}}, pgreplicagrpc.Options{Unsigned: true}, pgreplicagrpc.Options{Unsigned: true})
	for _, ctx := range []context.Context{ctxFor(t), pgreplica.WithSession(ctxFor(t), pgreplica.NewSession())} {
		if _, err := testservice.Unary(ctx, cc, ""); err != nil {
			t.Fatal(err)
		}
		if handlerSession == nil || handlerSession.LSN() != 0 {
			t.Fatalf("handler session %v", handlerSession)
		}
	}
	for _, md := range got {
		if v := md.Get(key); len(v) != 0 {
			t.Fatalf("token sent without a position: %q", v)
		}
	}
}

// TestDefaultWriteBackOnlyAfterWrites: by default a call that did not
// write sends nothing back, even when its session advanced; a failing
// call that advanced still does with WriteBackAlways.
func TestDefaultWriteBackOnlyAfterWrites(t *testing.T) {
	h := &testservice.Handlers{Unary: func(ctx context.Context, req string) (string, error) {
		advance(ctx, 0x900)
		if req == "fail" {
			return "", status.Error(codes.Aborted, "failed after the write")
		}
		return "", nil
	}}
	cc := serve(t, h, pgreplicagrpc.Options{Unsigned: true}, pgreplicagrpc.Options{Unsigned: true})
	s := session(t, 0x10)
	var header, trailer metadata.MD
	if _, err := testservice.Unary(pgreplica.WithSession(ctxFor(t), s), cc, "", grpc.Header(&header), grpc.Trailer(&trailer)); err != nil {
		t.Fatal(err)
	}
	if len(header.Get(key))+len(trailer.Get(key)) != 0 || s.LSN() != 0x10 {
		t.Fatalf("a read-only call sent back %v %v; session at %v", header, trailer, s.LSN())
	}

	cc = serve(t, h, pgreplicagrpc.Options{Unsigned: true, WriteBack: pgreplicagrpc.WriteBackAlways}, pgreplicagrpc.Options{Unsigned: true})
	_, err := testservice.Unary(pgreplica.WithSession(ctxFor(t), s), cc, "fail")
	if status.Code(err) != codes.Aborted {
		t.Fatalf("err %v", err)
	}
	if s.LSN() != 0x900 {
		t.Fatalf("a failed call's advance did not come back: session at %v", s.LSN())
	}
}

// TestAdvanceBelowClientNotSent: with WriteBackAlways, a session that did
// not move past what the client sent sends nothing back.
func TestAdvanceBelowClientNotSent(t *testing.T) {
	opts := pgreplicagrpc.Options{Unsigned: true, WriteBack: pgreplicagrpc.WriteBackAlways}
	cc := serve(t, &testservice.Handlers{Unary: func(ctx context.Context, req string) (string, error) {
		advance(ctx, 0x50) // below the client's 0x100
		return "", nil
	}}, opts, opts)
	var header, trailer metadata.MD
	if _, err := testservice.Unary(pgreplica.WithSession(ctxFor(t), session(t, 0x100)), cc, "", grpc.Header(&header), grpc.Trailer(&trailer)); err != nil {
		t.Fatal(err)
	}
	if len(header.Get(key))+len(trailer.Get(key)) != 0 {
		t.Fatalf("sent back %v %v", header, trailer)
	}
}

// TestHeaderSentByHandler: a unary handler that sent its header before
// it advanced gets its token into the trailer.
func TestHeaderSentByHandler(t *testing.T) {
	opts := pgreplicagrpc.Options{Unsigned: true, WriteBack: pgreplicagrpc.WriteBackAlways}
	cc := serve(t, &testservice.Handlers{Unary: func(ctx context.Context, req string) (string, error) {
		if err := grpc.SendHeader(ctx, metadata.Pairs("x-early", "1")); err != nil {
			return "", err
		}
		advance(ctx, 0x777)
		return "", nil
	}}, opts, opts)
	s := session(t, 0)
	var header, trailer metadata.MD
	if _, err := testservice.Unary(pgreplica.WithSession(ctxFor(t), s), cc, "", grpc.Header(&header), grpc.Trailer(&trailer)); err != nil {
		t.Fatal(err)
	}
	if _, ok := tokenLSN(t, pgreplica.TokenCodec{}, header); ok || header.Get("x-early") == nil {
		t.Fatalf("header %v", header)
	}
	if tok, ok := tokenLSN(t, pgreplica.TokenCodec{}, trailer); !ok || tok.LSN != 0x777 {
		t.Fatalf("trailer %v", trailer)
	}
	if s.LSN() != 0x777 {
		t.Fatalf("session at %v", s.LSN())
	}
}

// TestBadRequestTokens: garbled, forged, unsigned, expired and oversized
// tokens, and tokens Options.Check refuses, are ignored (a valid token next to them still counts) or
// rejected with codes.InvalidArgument by option, never quoted, and never
// reach the handler's session.
func TestBadRequestTokens(t *testing.T) {
	codec := pgreplica.TokenCodec{Key: testKey}
	past := pgreplica.TokenCodec{Key: testKey, TTL: time.Minute, Now: func() time.Time { return time.Now().Add(-time.Hour) }}
	bad := map[string]string{
		"garbled":   "%%%not-a-token",
		"forged":    pgreplica.TokenCodec{Key: bytes.Repeat([]byte("x"), 32)}.Encode(pgreplica.Token{LSN: 1 << 60}),
		"unsigned":  pgreplica.TokenCodec{}.Encode(pgreplica.Token{LSN: 1 << 60}),
		"expired":   past.Encode(pgreplica.Token{LSN: 1 << 60}),
		"oversized": strings.Repeat("A", 5000),
		// Signed, but refused by Check (as pgreplica.TokenCheck refuses a
		// position ahead of the primary's).
		"refused by Check": codec.Encode(pgreplica.Token{LSN: 1 << 60}),
	}
	check := func(_ context.Context, tok pgreplica.Token) error {
		if tok.LSN > 1<<40 {
			return fmt.Errorf("%w: ahead", pgreplica.ErrBadToken)
		}
		return nil
	}
	good := codec.Encode(pgreplica.Token{LSN: 0x42})
	for name, value := range bad {
		for _, policy := range []pgreplicagrpc.BadTokenPolicy{pgreplicagrpc.IgnoreBadToken, pgreplicagrpc.RejectBadToken} {
			t.Run(fmt.Sprintf("%s/policy%d", name, policy), func(t *testing.T) {
				var logs syncBuffer
				called := false
				var seen pgreplica.LSN
				h := &testservice.Handlers{
					Unary: func(ctx context.Context, req string) (string, error) {
						called, seen = true, pgreplica.SessionFrom(ctx).LSN()
						return "", nil
					},
					Stream: func(stream grpc.ServerStream) error {
						called, seen = true, pgreplica.SessionFrom(stream.Context()).LSN()
						return nil
					},
				}
				opts := pgreplicagrpc.Options{
					Codec: codec, BadToken: policy, Check: check,
					Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
				}
				// No client interceptor: the test writes the metadata.
				cc := testservice.Serve(t, h, serverOpts(opts))
				for _, withGood := range []bool{false, true} {
					ctx := metadata.AppendToOutgoingContext(ctxFor(t), key, value)
					if withGood {
						ctx = metadata.AppendToOutgoingContext(ctx, key, good)
					}
					calls := map[string]func() error{
						"unary": func() error { _, err := testservice.Unary(ctx, cc, ""); return err },
						"stream": func() error {
							st, err := testservice.Stream(ctx, cc)
							if err != nil {
								return err
							}
							st.CloseSend()
							_, err = testservice.Recv(st)
							if err == io.EOF {
								err = nil
							}
							return err
						},
					}
					for kind, call := range calls {
						called, seen = false, 0
						err := call()
						if policy == pgreplicagrpc.RejectBadToken {
							if status.Code(err) != codes.InvalidArgument || called {
								t.Fatalf("%s: err %v, handler called %v; want InvalidArgument without the handler", kind, err, called)
							}
							if msg := status.Convert(err).Message(); strings.Contains(msg, value) || !strings.Contains(msg, key) {
								t.Fatalf("%s: status message %q", kind, msg)
							}
							continue
						}
						want := pgreplica.LSN(0)
						if withGood {
							want = 0x42
						}
						if err != nil || !called || seen != want {
							t.Fatalf("%s (valid token too: %v): err %v, called %v, handler at %v; want %v", kind, withGood, err, called, seen, want)
						}
					}
				}
				if l := logs.String(); !strings.Contains(l, "bad token") || strings.Contains(l, value) {
					t.Fatalf("log: %s", l)
				}
			})
		}
	}
}

// syncBuffer is a bytes.Buffer safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestBadResponseToken: a token the client cannot decode (another key)
// is logged and ignored, and the call succeeds.
func TestBadResponseToken(t *testing.T) {
	var logs syncBuffer
	srv := pgreplicagrpc.Options{Codec: pgreplica.TokenCodec{Key: bytes.Repeat([]byte("s"), 32)}, WriteBack: pgreplicagrpc.WriteBackAlways}
	cli := pgreplicagrpc.Options{
		Codec:  pgreplica.TokenCodec{Key: bytes.Repeat([]byte("s"), 32)},
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	}
	cc := serve(t, &testservice.Handlers{Unary: func(ctx context.Context, req string) (string, error) {
		advance(ctx, 0x1234)
		return "done", nil
	}}, srv, cli)
	s := session(t, 0)
	if out, err := testservice.Unary(pgreplica.WithSession(ctxFor(t), s), cc, ""); err != nil || out != "done" {
		t.Fatalf("%q, %v", out, err)
	}
	if s.LSN() != 0x1234 {
		t.Fatalf("same keys: session at %v", s.LSN())
	}

	cli.Codec.Key = bytes.Repeat([]byte("c"), 32)
	cc = serve(t, &testservice.Handlers{Unary: func(ctx context.Context, req string) (string, error) {
		advance(ctx, 0x5678)
		return "done", nil
	}}, srv, cli)
	s = session(t, 0)
	if out, err := testservice.Unary(pgreplica.WithSession(ctxFor(t), s), cc, ""); err != nil || out != "done" {
		t.Fatalf("%q, %v", out, err)
	}
	if s.LSN() != 0 {
		t.Fatalf("a token of another key reached the session: %v", s.LSN())
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "bad signature") {
		t.Fatalf("log: %s", logs.String())
	}
}

// TestStreamHeaderThenTrailer: a stream's handler sees the client's
// position; what it did before its first message arrives with that
// message (in the header), what it did after arrives with the end of the
// stream (in the trailer).
func TestStreamHeaderThenTrailer(t *testing.T) {
	codec := pgreplica.TokenCodec{Key: testKey, TTL: time.Minute}
	opts := pgreplicagrpc.Options{Codec: codec, WriteBack: pgreplicagrpc.WriteBackAlways}
	next := make(chan struct{})
	cc := serve(t, &testservice.Handlers{Stream: func(stream grpc.ServerStream) error {
		ctx := stream.Context()
		advance(ctx, 0x2000)
		if err := testservice.Send(stream, pgreplica.SessionFrom(ctx).LSN().String()); err != nil {
			return err
		}
		<-next
		advance(ctx, 0x3000)
		return testservice.Send(stream, "second")
	}}, opts, opts)

	s := session(t, 0x1000)
	st, err := testservice.Stream(pgreplica.WithSession(ctxFor(t), s), cc)
	if err != nil {
		t.Fatal(err)
	}
	first, err := testservice.Recv(st)
	if err != nil || first != "0/2000" {
		t.Fatalf("first message %q, %v", first, err)
	}
	if s.LSN() != 0x2000 {
		t.Fatalf("after the first message the session is at %v, want 0/2000", s.LSN())
	}
	close(next)
	for {
		if _, err := testservice.Recv(st); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if s.LSN() != 0x3000 {
		t.Fatalf("at the end of the stream the session is at %v, want 0/3000", s.LSN())
	}
	hdr, _ := st.Header()
	if tok, ok := tokenLSN(t, codec, hdr); !ok || tok.LSN != 0x2000 {
		t.Fatalf("header %v", hdr)
	}
	if tok, ok := tokenLSN(t, codec, st.Trailer()); !ok || tok.LSN != 0x3000 {
		t.Fatalf("trailer %v", st.Trailer())
	}
}

// TestStreamSendHeader: stream.SendHeader also carries the token.
func TestStreamSendHeader(t *testing.T) {
	opts := pgreplicagrpc.Options{Unsigned: true, WriteBack: pgreplicagrpc.WriteBackAlways}
	cc := serve(t, &testservice.Handlers{Stream: func(stream grpc.ServerStream) error {
		advance(stream.Context(), 0xABC)
		if err := stream.SendHeader(metadata.Pairs("x-mine", "1")); err != nil {
			return err
		}
		_, err := testservice.Recv(stream) // until the client closes
		if err == io.EOF {
			err = nil
		}
		return err
	}}, opts, opts)
	s := session(t, 0)
	st, err := testservice.Stream(pgreplica.WithSession(ctxFor(t), s), cc)
	if err != nil {
		t.Fatal(err)
	}
	hdr, err := st.Header()
	if err != nil {
		t.Fatal(err)
	}
	if hdr.Get("x-mine") == nil || s.LSN() != 0xABC {
		t.Fatalf("header %v, session at %v", hdr, s.LSN())
	}
	st.CloseSend()
	if _, err := testservice.Recv(st); err != io.EOF {
		t.Fatal(err)
	}
	if v := st.Trailer().Get(key); v != nil {
		t.Fatalf("token sent twice: trailer %v", v)
	}
}

// TestClientStreaming: a client-streaming call (one response) brings the
// token back with its single message (in the header, which leaves with
// the message, after the advance).
func TestClientStreaming(t *testing.T) {
	opts := pgreplicagrpc.Options{Unsigned: true, WriteBack: pgreplicagrpc.WriteBackAlways}
	cc := serve(t, &testservice.Handlers{Stream: func(stream grpc.ServerStream) error {
		n := 0
		for {
			if _, err := testservice.Recv(stream); err == io.EOF {
				break
			} else if err != nil {
				return err
			}
			n++
		}
		advance(stream.Context(), pgreplica.LSN(0x100*n))
		return testservice.Send(stream, fmt.Sprint(n))
	}}, opts, opts)
	s := session(t, 0)
	st, err := testservice.ClientStream(pgreplica.WithSession(ctxFor(t), s), cc)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := testservice.Send(st, "x"); err != nil {
			t.Fatal(err)
		}
	}
	st.CloseSend()
	if n, err := testservice.Recv(st); err != nil || n != "3" {
		t.Fatalf("%q, %v", n, err)
	}
	if s.LSN() != 0x300 {
		t.Fatalf("session at %v", s.LSN())
	}
}

// TestClientStreamingTrailer: the token of a client-streaming call that
// the server advanced after its headers left arrives in the trailer, with
// the single response message.
func TestClientStreamingTrailer(t *testing.T) {
	opts := pgreplicagrpc.Options{Unsigned: true, WriteBack: pgreplicagrpc.WriteBackAlways}
	cc := serve(t, &testservice.Handlers{Stream: func(stream grpc.ServerStream) error {
		if err := stream.SendHeader(nil); err != nil {
			return err
		}
		for {
			if _, err := testservice.Recv(stream); err == io.EOF {
				break
			} else if err != nil {
				return err
			}
		}
		advance(stream.Context(), 0x4242)
		return testservice.Send(stream, "one")
	}}, opts, opts)
	s := session(t, 0)
	st, err := testservice.ClientStream(pgreplica.WithSession(ctxFor(t), s), cc)
	if err != nil {
		t.Fatal(err)
	}
	st.CloseSend()
	if _, err := testservice.Recv(st); err != nil {
		t.Fatal(err)
	}
	if s.LSN() != 0x4242 {
		t.Fatalf("session at %v, want the trailer's 0/4242", s.LSN())
	}
}

// TestChainRelaysWrites: A calls B, B calls C with its handler's session,
// C's position comes back to B, and B (default policy: only writes) hands
// it on to A, because what a downstream call brought back counts as a
// write of B's.
func TestChainRelaysWrites(t *testing.T) {
	always := pgreplicagrpc.Options{Unsigned: true, WriteBack: pgreplicagrpc.WriteBackAlways}
	def := pgreplicagrpc.Options{Unsigned: true}
	toC := serve(t, &testservice.Handlers{Unary: func(ctx context.Context, req string) (string, error) {
		if req == "advance" {
			advance(ctx, 0xC0FFEE) // C "writes"
		}
		return "", nil
	}}, always, def)
	toB := serve(t, &testservice.Handlers{Unary: func(ctx context.Context, req string) (string, error) {
		// B's handler calls C with its own context (its session).
		_, err := testservice.Unary(ctx, toC, req)
		return "", err
	}}, def, def)

	for _, tc := range []struct {
		req  string
		want pgreplica.LSN
	}{{"advance", 0xC0FFEE}, {"read", 0x10}} {
		s := session(t, 0x10)
		var header, trailer metadata.MD
		if _, err := testservice.Unary(pgreplica.WithSession(ctxFor(t), s), toB, tc.req, grpc.Header(&header), grpc.Trailer(&trailer)); err != nil {
			t.Fatal(err)
		}
		if s.LSN() != tc.want {
			t.Fatalf("%s: A's session at %v, want %v", tc.req, s.LSN(), tc.want)
		}
		if tc.want == 0x10 && len(header.Get(key))+len(trailer.Get(key)) != 0 {
			t.Fatalf("%s: B sent back %v %v", tc.req, header, trailer)
		}
	}
}

// TestServerSessionReused: a session an earlier interceptor put in the
// context is the handler's, with the client's token merged in.
func TestServerSessionReused(t *testing.T) {
	outer := session(t, 0x5)
	var inner *pgreplica.Session
	first := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(pgreplica.WithSession(ctx, outer), req)
	}
	cc := testservice.Serve(t, &testservice.Handlers{Unary: func(ctx context.Context, req string) (string, error) {
		inner = pgreplica.SessionFrom(ctx)
		return "", nil
	}}, []grpc.ServerOption{grpc.ChainUnaryInterceptor(first, pgreplicagrpc.UnaryServerInterceptor(pgreplicagrpc.Options{Unsigned: true}))},
		dialOpts(pgreplicagrpc.Options{Unsigned: true})...)
	if _, err := testservice.Unary(pgreplica.WithSession(ctxFor(t), session(t, 0x99)), cc, ""); err != nil {
		t.Fatal(err)
	}
	if inner != outer || outer.LSN() != 0x99 {
		t.Fatalf("handler session %p (outer %p) at %v", inner, outer, outer.LSN())
	}
}

// TestMetadataKeyOption: a custom key, given in any case, carries the
// token; the default key is then not read.
func TestMetadataKeyOption(t *testing.T) {
	opts := pgreplicagrpc.Options{Unsigned: true, MetadataKey: "X-Consistency"}
	var seen pgreplica.LSN
	var md metadata.MD
	cc := serve(t, &testservice.Handlers{Unary: func(ctx context.Context, req string) (string, error) {
		seen = pgreplica.SessionFrom(ctx).LSN()
		md, _ = metadata.FromIncomingContext(ctx)
		return "", nil
	}}, opts, opts)
	ctx := metadata.AppendToOutgoingContext(ctxFor(t), key, pgreplica.TokenCodec{}.Encode(pgreplica.Token{LSN: 0x9999}))
	if _, err := testservice.Unary(pgreplica.WithSession(ctx, session(t, 0x33)), cc, ""); err != nil {
		t.Fatal(err)
	}
	if seen != 0x33 || len(md.Get("x-consistency")) != 1 {
		t.Fatalf("handler at %v, metadata %v", seen, md)
	}
}

// TestInvalidOptions: New refuses invalid options with an error (a
// missing key with one that matches pgreplica.ErrNoTokenKey), and every
// interceptor constructor panics with the same error.
func TestInvalidOptions(t *testing.T) {
	for name, o := range map[string]pgreplicagrpc.Options{
		"no key":            {},
		"key and unsigned":  {Codec: pgreplica.TokenCodec{Key: testKey}, Unsigned: true},
		"reserved key":      {Unsigned: true, MetadataKey: "grpc-token"},
		"binary key":        {Unsigned: true, MetadataKey: "token-bin"},
		"pseudo header":     {Unsigned: true, MetadataKey: ":path"},
		"bad character":     {Unsigned: true, MetadataKey: "a b"},
		"unknown policy":    {Unsigned: true, BadToken: 9},
		"unknown writeback": {Unsigned: true, WriteBack: 9},
	} {
		ic, err := pgreplicagrpc.New(o)
		if ic != nil || err == nil || !strings.HasPrefix(err.Error(), "pgreplicagrpc: ") {
			t.Errorf("%s: New: %v", name, err)
			continue
		}
		if noKey := errors.Is(err, pgreplica.ErrNoTokenKey); noKey != (name == "no key") {
			t.Errorf("%s: New: %v; matches ErrNoTokenKey: %v", name, err, noKey)
		}
		for kind, ctor := range map[string]func(pgreplicagrpc.Options){
			"unary server":  func(o pgreplicagrpc.Options) { pgreplicagrpc.UnaryServerInterceptor(o) },
			"stream server": func(o pgreplicagrpc.Options) { pgreplicagrpc.StreamServerInterceptor(o) },
			"unary client":  func(o pgreplicagrpc.Options) { pgreplicagrpc.UnaryClientInterceptor(o) },
			"stream client": func(o pgreplicagrpc.Options) { pgreplicagrpc.StreamClientInterceptor(o) },
		} {
			t.Run(name+"/"+kind, func(t *testing.T) {
				defer func() {
					if r, _ := recover().(error); r == nil || r.Error() != err.Error() {
						t.Fatalf("recovered %v, want New's error %v", r, err)
					}
				}()
				ctor(o)
			})
		}
	}
	if _, err := pgreplicagrpc.New(pgreplicagrpc.Options{Codec: pgreplica.TokenCodec{Key: testKey}}); err != nil {
		t.Errorf("with a key: %v", err)
	}
}

// TestConcurrentCallsOneSession: calls of one session in parallel, each
// bringing back its own position: the session ends at the highest.
func TestConcurrentCallsOneSession(t *testing.T) {
	opts := pgreplicagrpc.Options{Codec: pgreplica.TokenCodec{Key: testKey}, WriteBack: pgreplicagrpc.WriteBackAlways}
	cc := serve(t, &testservice.Handlers{
		Unary: func(ctx context.Context, req string) (string, error) {
			var n int
			fmt.Sscan(req, &n)
			advance(ctx, pgreplica.LSN(n))
			return "", nil
		},
		Stream: func(stream grpc.ServerStream) error {
			for {
				req, err := testservice.Recv(stream)
				if err == io.EOF {
					return nil
				} else if err != nil {
					return err
				}
				var n int
				fmt.Sscan(req, &n)
				advance(stream.Context(), pgreplica.LSN(n))
				if err := testservice.Send(stream, req); err != nil {
					return err
				}
			}
		},
	}, opts, opts)
	s := session(t, 0)
	ctx := pgreplica.WithSession(ctxFor(t), s)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 32 {
		wg.Go(func() {
			if _, err := testservice.Unary(ctx, cc, fmt.Sprint(1000+i)); err != nil {
				errs <- err
			}
		})
		wg.Go(func() {
			st, err := testservice.Stream(ctx, cc)
			if err != nil {
				errs <- err
				return
			}
			testservice.Send(st, fmt.Sprint(2000+i))
			st.CloseSend()
			for {
				if _, err := testservice.Recv(st); err == io.EOF {
					return
				} else if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if s.LSN() != 2031 {
		t.Fatalf("session at %v, want 2031", s.LSN())
	}
}
