// Package testservice is a tiny gRPC service for pgreplicagrpc's tests,
// written by hand: its messages are the well-known
// google.protobuf.StringValue, its service descriptor is built here, and
// nothing is generated.
package testservice

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Service name and full method names.
const (
	Service      = "pgreplicagrpc.test.Test"
	UnaryMethod  = "/" + Service + "/Unary"
	StreamMethod = "/" + Service + "/Stream"
)

// Handlers implement the service. A nil handler fails its calls.
type Handlers struct {
	// Unary answers one string with one string.
	Unary func(ctx context.Context, req string) (string, error)
	// Stream is a bidirectional stream of strings (see Send and Recv).
	Stream func(stream grpc.ServerStream) error
}

// streamDesc is the service's one stream, shared by server and client.
var streamDesc = grpc.StreamDesc{StreamName: "Stream", ServerStreams: true, ClientStreams: true}

// Register registers h with s.
func Register(s grpc.ServiceRegistrar, h *Handlers) {
	sd := streamDesc
	sd.Handler = func(srv any, stream grpc.ServerStream) error {
		return srv.(*Handlers).Stream(stream)
	}
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: Service,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Unary",
			Handler: func(srv any, ctx context.Context, dec func(any) error, intercept grpc.UnaryServerInterceptor) (any, error) {
				in := new(wrapperspb.StringValue)
				if err := dec(in); err != nil {
					return nil, err
				}
				call := func(ctx context.Context, req any) (any, error) {
					out, err := srv.(*Handlers).Unary(ctx, req.(*wrapperspb.StringValue).GetValue())
					if err != nil {
						return nil, err
					}
					return wrapperspb.String(out), nil
				}
				if intercept == nil {
					return call(ctx, in)
				}
				return intercept(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: UnaryMethod}, call)
			},
		}},
		Streams: []grpc.StreamDesc{sd},
	}, h)
}

// Unary calls the Unary method.
func Unary(ctx context.Context, cc grpc.ClientConnInterface, req string, opts ...grpc.CallOption) (string, error) {
	out := new(wrapperspb.StringValue)
	if err := cc.Invoke(ctx, UnaryMethod, wrapperspb.String(req), out, opts...); err != nil {
		return "", err
	}
	return out.GetValue(), nil
}

// Stream opens the bidirectional stream.
func Stream(ctx context.Context, cc grpc.ClientConnInterface, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return cc.NewStream(ctx, &streamDesc, StreamMethod, opts...)
}

// ClientStream opens the stream as a client-streaming call: the client
// sends any number of strings, then CloseSend, then receives exactly one
// (the server handler must send exactly one).
func ClientStream(ctx context.Context, cc grpc.ClientConnInterface, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return cc.NewStream(ctx, &grpc.StreamDesc{StreamName: "Stream", ClientStreams: true}, StreamMethod, opts...)
}

// Send sends a string on a client or server stream.
func Send(s interface{ SendMsg(any) error }, v string) error {
	return s.SendMsg(wrapperspb.String(v))
}

// Recv receives a string from a client or server stream.
func Recv(s interface{ RecvMsg(any) error }) (string, error) {
	m := new(wrapperspb.StringValue)
	err := s.RecvMsg(m)
	return m.GetValue(), err
}

// Serve starts an in-process server of h over bufconn, with the server
// options given, and returns a client connection to it with the dial
// options given. Both stop when t ends.
func Serve(t testing.TB, h *Handlers, srvOpts []grpc.ServerOption, dialOpts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(srvOpts...)
	Register(srv, h)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	dialOpts = append([]grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}, dialOpts...)
	cc, err := grpc.NewClient("passthrough:///bufnet", dialOpts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}
