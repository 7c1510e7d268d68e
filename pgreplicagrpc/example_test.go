package pgreplicagrpc_test

import (
	"context"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/pgreplicagrpc"
)

// getItem is service B's handler. In a real service it reads through ctx:
// db.QueryRowContext(ctx, "SELECT ... WHERE id = $1", id) goes to a
// replica that replayed the caller's writes, or to the primary.
func getItem(ctx context.Context, id string) (string, error) {
	return fmt.Sprint("B reads ", id, " at ", pgreplica.SessionFrom(ctx).LSN()), nil
}

// itemsService describes B's one method by hand (generated code does the
// same); its messages are the well-known google.protobuf.StringValue.
var itemsService = grpc.ServiceDesc{
	ServiceName: "example.Items",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Get",
		Handler: func(_ any, ctx context.Context, dec func(any) error, intercept grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			return intercept(ctx, in, &grpc.UnaryServerInfo{FullMethod: "/example.Items/Get"},
				func(ctx context.Context, req any) (any, error) {
					out, err := getItem(ctx, req.(*wrapperspb.StringValue).GetValue())
					return wrapperspb.String(out), err
				})
		},
	}},
}

// Service A calls service B with the session it wrote with; B's handler
// reads with that session. Both sign tokens with the same key; B rejects
// tokens it cannot verify.
func Example() {
	opts := pgreplicagrpc.Options{
		Codec:    pgreplica.TokenCodec{Key: []byte("an example key of at least 32 bytes!")},
		BadToken: pgreplicagrpc.RejectBadToken,
	}

	// Service B, in-process over bufconn here.
	lis := bufconn.Listen(1 << 20)
	b := grpc.NewServer(
		grpc.ChainUnaryInterceptor(pgreplicagrpc.UnaryServerInterceptor(opts)),
		grpc.ChainStreamInterceptor(pgreplicagrpc.StreamServerInterceptor(opts)),
	)
	b.RegisterService(&itemsService, nil)
	go b.Serve(lis)
	defer b.Stop()

	// Service A's client of B.
	cc, err := grpc.NewClient("passthrough:///b",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(pgreplicagrpc.UnaryClientInterceptor(opts)),
		grpc.WithChainStreamInterceptor(pgreplicagrpc.StreamClientInterceptor(opts)),
	)
	if err != nil {
		panic(err)
	}
	defer cc.Close()

	// A writes with a session...
	sess := pgreplica.NewSession()
	ctx := pgreplica.WithSession(context.Background(), sess)
	// db.ExecContext(ctx, "INSERT ...") does this:
	sess.Merge(pgreplica.Token{LSN: 0x16_B374D848})

	// ...and calls B with it.
	out := new(wrapperspb.StringValue)
	if err := cc.Invoke(ctx, "/example.Items/Get", wrapperspb.String("item 7"), out); err != nil {
		panic(err)
	}
	fmt.Println(out.GetValue())

	// A token signed with another key does not pass.
	forged := pgreplica.TokenCodec{Key: []byte("not the key, but 32 bytes long!!")}.Encode(pgreplica.Token{LSN: 1 << 40})
	err = cc.Invoke(metadata.AppendToOutgoingContext(context.Background(), pgreplicagrpc.DefaultMetadataKey, forged),
		"/example.Items/Get", wrapperspb.String("item 7"), out)
	fmt.Println(status.Code(err))
	// Output:
	// B reads item 7 at 16/B374D848
	// InvalidArgument
}
