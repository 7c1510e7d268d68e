package pgreplicagrpc

import (
	"context"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/pgreplica/pgreplica"
)

// UnaryServerInterceptor returns a server interceptor for unary calls that
// gives every call a pgreplica.Session carrying the caller's token, so
// reads through the handler's context see the caller's earlier writes, and
// hands the advanced token back to the caller.
//
// For each call it:
//
//  1. decodes every value of opts.MetadataKey in the incoming metadata
//     with opts.Codec, checks it with opts.Check, and max-merges them into
//     the session. An empty value counts as absent; a bad one (one Decode
//     or Check refused) is ignored or fails the call with
//     codes.InvalidArgument (opts.BadToken);
//  2. calls the handler with the session attached to its context
//     (pgreplica.WithSession). A session already in the context (from an
//     interceptor that ran before) is reused;
//  3. once the handler returned, if the token is due (opts.WriteBack: by
//     default, the handler wrote through the session), sets the session's
//     token under opts.MetadataKey in the response header, or in the
//     trailer when the handler already sent the header (grpc.SendHeader).
//     It does so whether the handler succeeded, failed or panicked: the
//     write committed either way.
//
// It panics on invalid options (see New).
func UnaryServerInterceptor(opts Options) grpc.UnaryServerInterceptor {
	return mustNew(opts).UnaryServer()
}

// UnaryServer is UnaryServerInterceptor with ic's options.
func (ic *Interceptors) UnaryServer() grpc.UnaryServerInterceptor {
	o := ic.o
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		x, err := o.begin(ctx)
		if err != nil {
			return nil, err
		}
		defer x.end(unaryMetadata{ctx})
		return handler(x.ctx, req)
	}
}

// StreamServerInterceptor returns a server interceptor for streaming calls
// that does what UnaryServerInterceptor does, with one addition: the
// headers of a stream may leave long before the handler returns, so the
// token goes in the response header when the handler wrote before the
// headers left (its first SendMsg or SendHeader on the stream), and in the
// trailer when it wrote after, or wrote again. The handler's stream
// returns the session's context from Context.
//
// A handler that sends the headers with grpc.SendHeader(stream.Context(),
// ...) rather than with stream.SendHeader bypasses the interceptor's
// stream: its token then goes in the trailer.
//
// It panics on invalid options (see New).
func StreamServerInterceptor(opts Options) grpc.StreamServerInterceptor {
	return mustNew(opts).StreamServer()
}

// StreamServer is StreamServerInterceptor with ic's options.
func (ic *Interceptors) StreamServer() grpc.StreamServerInterceptor {
	o := ic.o
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		x, err := o.begin(ss.Context())
		if err != nil {
			return err
		}
		defer x.end(streamMetadata{ss})
		return handler(srv, &serverStream{ServerStream: ss, x: x})
	}
}

// exchangeKey is the context key of a call's *exchange.
type exchangeKey struct{}

// exchange is a server interceptor's state for one call.
type exchange struct {
	o       *Options
	ctx     context.Context // the handler's: the session and the exchange
	session *pgreplica.Session

	// relays counts the calls the handler made with this session through
	// a client interceptor of this package whose response brought back a
	// token that moved the session: a downstream service wrote, and that
	// write is due to the caller as much as the handler's own.
	relays atomic.Uint64

	mu sync.Mutex
	// headersGone is set once the stream's headers left or were about
	// to (the first SendMsg or SendHeader).
	headersGone bool
	// sent is what the caller already has: the token it brought (with
	// WriteBackAlways) merged with every token sent back; sentWrites the
	// session's WriteCount when the last one was built (when the handler
	// began, until then).
	sent       pgreplica.Token
	sentWrites uint64
	// sentRelays is relays when the last token sent was built.
	sentRelays uint64
}

// begin restores the session of a call from its incoming metadata. The
// error, a codes.InvalidArgument status, rejects the call.
func (o *Options) begin(ctx context.Context) (*exchange, error) {
	var toks []pgreplica.Token
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get(o.MetadataKey) {
		if v == "" {
			continue
		}
		tok, err := o.Codec.Decode(v)
		if err == nil && o.Check != nil {
			err = o.Check(ctx, tok)
		}
		if err != nil {
			// Debug: callers send these, and a flood must not fill the logs.
			o.Logger.DebugContext(ctx, "pgreplicagrpc: bad token in the request metadata", "key", o.MetadataKey, "err", err)
			if o.BadToken == RejectBadToken {
				return nil, status.Errorf(codes.InvalidArgument, "pgreplicagrpc: metadata %q: %v", o.MetadataKey, err)
			}
			continue
		}
		toks = append(toks, tok)
	}
	x := &exchange{o: o, session: pgreplica.SessionFrom(ctx)}
	if x.session == nil {
		x.session = pgreplica.NewSession()
	}
	for _, tok := range toks {
		x.session.Merge(tok) // the error is always nil
	}
	x.sentWrites = x.session.WriteCount()
	if o.WriteBack == WriteBackAlways {
		// What the caller has: only a session that moves past it is due.
		x.sent = x.session.Snapshot()
	}
	x.ctx = context.WithValue(pgreplica.WithSession(ctx, x.session), exchangeKey{}, x)
	return x, nil
}

// due returns the token to send back, if one is due, and the function that
// records that it was sent. x.mu must be held.
func (x *exchange) due() (tok string, sent func(), ok bool) {
	writes := x.session.WriteCount()
	relays := x.relays.Load()
	wrote := writes != x.sentWrites || relays != x.sentRelays
	if !wrote && x.o.WriteBack != WriteBackAlways {
		return "", nil, false
	}
	snap := x.session.Snapshot()
	merged, moved := x.sent.Merge(snap)
	if !wrote && !moved {
		return "", nil, false
	}
	return x.o.Codec.Encode(snap), func() {
		x.sent, x.sentWrites, x.sentRelays = merged, writes, relays
	}, true
}

// responseMetadata is where a call's response metadata goes.
type responseMetadata interface {
	setHeader(metadata.MD) error
	setTrailer(metadata.MD) error
}

// beforeHeaders runs once, just before a stream's headers leave: it adds
// the token to them if one is due.
func (x *exchange) beforeHeaders(rm responseMetadata) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.headersGone {
		return
	}
	x.headersGone = true
	tok, sent, ok := x.due()
	if !ok {
		return
	}
	// It fails when the handler sent the headers with grpc.SendHeader:
	// the token then goes in the trailer.
	if rm.setHeader(metadata.Pairs(x.o.MetadataKey, tok)) == nil {
		sent()
	}
}

// end runs after the handler: it sends the token back if one is due, in
// the header if it has not left yet, else in the trailer.
func (x *exchange) end(rm responseMetadata) {
	x.mu.Lock()
	defer x.mu.Unlock()
	tok, _, ok := x.due()
	if !ok {
		return
	}
	md := metadata.Pairs(x.o.MetadataKey, tok)
	if !x.headersGone && rm.setHeader(md) == nil {
		return
	}
	if err := rm.setTrailer(md); err != nil {
		x.o.Logger.WarnContext(x.ctx, "pgreplicagrpc: cannot send the token back", "err", err)
	}
}

// unaryMetadata sets the response metadata of a unary call.
type unaryMetadata struct{ ctx context.Context }

func (u unaryMetadata) setHeader(md metadata.MD) error  { return grpc.SetHeader(u.ctx, md) }
func (u unaryMetadata) setTrailer(md metadata.MD) error { return grpc.SetTrailer(u.ctx, md) }

// streamMetadata sets the response metadata of a stream.
type streamMetadata struct{ ss grpc.ServerStream }

func (s streamMetadata) setHeader(md metadata.MD) error { return s.ss.SetHeader(md) }
func (s streamMetadata) setTrailer(md metadata.MD) error {
	s.ss.SetTrailer(md)
	return nil
}

// serverStream is the stream a streaming handler receives: it carries the
// session's context and adds a due token to the headers before they leave.
type serverStream struct {
	grpc.ServerStream
	x *exchange
}

func (s *serverStream) Context() context.Context { return s.x.ctx }

func (s *serverStream) SendHeader(md metadata.MD) error {
	s.x.beforeHeaders(streamMetadata{s.ServerStream})
	return s.ServerStream.SendHeader(md)
}

func (s *serverStream) SendMsg(m any) error {
	s.x.beforeHeaders(streamMetadata{s.ServerStream})
	return s.ServerStream.SendMsg(m)
}

// relay tells the server exchange of ctx, if any, that a call made with
// its session brought back a token that moved it.
func relay(ctx context.Context, s *pgreplica.Session) {
	if x, _ := ctx.Value(exchangeKey{}).(*exchange); x != nil && x.session == s {
		x.relays.Add(1)
	}
}
