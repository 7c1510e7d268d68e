package pgreplicagrpc

import (
	"context"
	"slices"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/pgreplica/pgreplica"
)

// UnaryClientInterceptor returns a client interceptor for unary calls that
// carries the session of the call's context (pgreplica.WithSession) to the
// server and brings back what the server wrote:
//
//  1. before the call, it appends the session's token (opts.Codec) to the
//     outgoing metadata under opts.MetadataKey, so the server's reads see
//     everything the session wrote, on every cluster. A session that
//     requires nothing yet (no write, no read) sends no token;
//  2. after the call, successful or not, it max-merges, per cluster
//     (pgreplica.Session.Merge), every token the response header and
//     trailer hold under opts.MetadataKey into the same session, so the
//     caller's next reads see what the server wrote. A bad token is logged
//     and ignored: the call has already run.
//
// A call whose context has no session passes through untouched. Building
// the token reads the positions the session still has pending (see
// pgreplica.Session.Token): after a write, or a replica read, one
// statement on the primary shared with other sessions.
//
// When the call is made from a handler of UnaryServerInterceptor or
// StreamServerInterceptor with the handler's session, a token brought back
// that moves the session counts as a write of the handler for
// Options.WriteBack: a write made further down a chain of calls (A calls
// B, which calls C, which writes) travels back to the start of the chain.
//
// It panics on invalid options (see New).
func UnaryClientInterceptor(opts Options) grpc.UnaryClientInterceptor {
	return mustNew(opts).UnaryClient()
}

// UnaryClient is UnaryClientInterceptor with ic's options.
func (ic *Interceptors) UnaryClient() grpc.UnaryClientInterceptor {
	o := ic.o
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		s := pgreplica.SessionFrom(ctx)
		if s == nil {
			return invoker(ctx, method, req, reply, cc, callOpts...)
		}
		ctx, sent := o.attach(ctx, s)
		var header, trailer metadata.MD
		err := invoker(ctx, method, req, reply, cc,
			slices.Concat(callOpts, []grpc.CallOption{grpc.Header(&header), grpc.Trailer(&trailer)})...)
		o.bringBack(ctx, s, sent, header, trailer)
		return err
	}
}

// StreamClientInterceptor returns a client interceptor for streaming calls
// that does what UnaryClientInterceptor does. The token goes with the
// stream's request headers. The server's token comes back in the response
// header or trailer (see StreamServerInterceptor), which the returned
// stream merges into the session when they arrive: the header with the
// first message RecvMsg returns (or when Header is called), the trailer
// when RecvMsg returns an error (io.EOF at the end of the stream) or, for
// streams whose server sends a single message, with that message. A caller
// that stops reading before the end of a server stream misses what the
// server wrote after its headers left.
//
// It panics on invalid options (see New).
func StreamClientInterceptor(opts Options) grpc.StreamClientInterceptor {
	return mustNew(opts).StreamClient()
}

// StreamClient is StreamClientInterceptor with ic's options.
func (ic *Interceptors) StreamClient() grpc.StreamClientInterceptor {
	o := ic.o
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, callOpts ...grpc.CallOption) (grpc.ClientStream, error) {
		s := pgreplica.SessionFrom(ctx)
		if s == nil {
			return streamer(ctx, desc, cc, method, callOpts...)
		}
		ctx, sent := o.attach(ctx, s)
		cs, err := streamer(ctx, desc, cc, method, callOpts...)
		if err != nil {
			return nil, err
		}
		return &clientStream{ClientStream: cs, o: &o, ctx: ctx, s: s, sent: sent, serverStreams: desc.ServerStreams}, nil
	}
}

// attach adds the session's token to the outgoing metadata, unless the
// session requires nothing. It returns the new context and what was sent.
func (o *Options) attach(ctx context.Context, s *pgreplica.Session) (context.Context, pgreplica.Token) {
	snap := s.Snapshot()
	if snap.LSNFor(0) == 0 { // LSNFor(0) is the highest position, or the highest LSN on overflow
		return ctx, pgreplica.Token{}
	}
	return metadata.AppendToOutgoingContext(ctx, o.MetadataKey, o.Codec.Encode(snap)), snap
}

// bringBack merges the response's tokens into s. sent is what the server
// already had: the token the call sent, merged with the tokens brought
// back before. It returns sent merged with the tokens of mds.
func (o *Options) bringBack(ctx context.Context, s *pgreplica.Session, sent pgreplica.Token, mds ...metadata.MD) pgreplica.Token {
	moved := false
	for _, md := range mds {
		for _, v := range md.Get(o.MetadataKey) {
			if v == "" {
				continue
			}
			tok, err := o.Codec.Decode(v)
			if err != nil {
				o.Logger.WarnContext(ctx, "pgreplicagrpc: bad token in the response metadata", "key", o.MetadataKey, "err", err)
				continue
			}
			s.Merge(tok) // the error is always nil
			var m bool
			if sent, m = sent.Merge(tok); m {
				moved = true
			}
		}
	}
	if moved {
		relay(ctx, s)
	}
	return sent
}

// clientStream merges the tokens of a stream's response header and
// trailer into the session as they arrive.
type clientStream struct {
	grpc.ClientStream
	o             *Options
	ctx           context.Context
	s             *pgreplica.Session
	serverStreams bool

	mu      sync.Mutex
	sent    pgreplica.Token // what the server already has (see bringBack)
	header  bool            // the header was merged
	trailer bool            // the trailer was merged
}

func (c *clientStream) Header() (metadata.MD, error) {
	md, err := c.ClientStream.Header()
	if err == nil {
		c.merge(md, &c.header)
	}
	return md, err
}

func (c *clientStream) Trailer() metadata.MD {
	md := c.ClientStream.Trailer()
	c.merge(md, &c.trailer)
	return md
}

func (c *clientStream) RecvMsg(m any) error {
	err := c.ClientStream.RecvMsg(m)
	// Once a message arrived, or the stream ended, the header is there
	// and Header does not block.
	c.mergeHeader()
	if err != nil || !c.serverStreams {
		// The stream ended (a server that sends a single message has
		// ended it when RecvMsg returns that message): so did the
		// trailer.
		c.merge(c.ClientStream.Trailer(), &c.trailer)
	}
	return err
}

// mergeHeader merges the response header, once.
func (c *clientStream) mergeHeader() {
	c.mu.Lock()
	done := c.header
	c.mu.Unlock()
	if done {
		return
	}
	if md, err := c.ClientStream.Header(); err == nil {
		c.merge(md, &c.header)
	}
}

// merge merges the tokens of md, unless done, and sets done.
func (c *clientStream) merge(md metadata.MD, done *bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if *done {
		return
	}
	*done = true
	c.sent = c.o.bringBack(c.ctx, c.s, c.sent, md)
}
