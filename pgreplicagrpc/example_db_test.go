package pgreplicagrpc_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/pgreplicagrpc"
)

// The options every service of the application shares: the same key
// everywhere, and tokens that stop counting after ten minutes.
var sharedOpts = pgreplicagrpc.Options{
	Codec: pgreplica.TokenCodec{Key: []byte(os.Getenv("PGREPLICA_TOKEN_KEY")), TTL: 10 * time.Minute},
}

// Service B: its handlers read and write through the call's context, which
// carries the caller's session; after a write the interceptor hands the
// token back. (Compile-only: it needs a cluster.)
func ExampleUnaryServerInterceptor() {
	db, err := sql.Open("pgreplica", "postgres://app@db1,db2,db3/shop?sslmode=disable")
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(pgreplicagrpc.UnaryServerInterceptor(sharedOpts)),
		grpc.ChainStreamInterceptor(pgreplicagrpc.StreamServerInterceptor(sharedOpts)),
	)
	// Register the services; a handler then does, with its ctx:
	createOrder := func(ctx context.Context, sku string) (id string, err error) {
		// The primary; the session advances, and the token goes back.
		err = db.QueryRowContext(ctx, "INSERT INTO orders (sku) VALUES ($1) RETURNING id", sku).Scan(&id)
		return id, err
	}
	_, _ = srv, createOrder
}

// New builds the four interceptors of one Options, or says what is wrong
// with them: here, with PGREPLICA_TOKEN_KEY unset, that there is no key.
// The request tokens are checked against the cluster the service uses.
// (Compile-only: it needs a cluster.)
func ExampleNew() {
	db, err := sql.Open("pgreplica", "postgres://app@db1,db2,db3/shop?sslmode=disable")
	if err != nil {
		panic(err)
	}
	opts := sharedOpts
	opts.Check = pgreplica.TokenCheck(db)
	ic, err := pgreplicagrpc.New(opts)
	if errors.Is(err, pgreplica.ErrNoTokenKey) {
		panic("set PGREPLICA_TOKEN_KEY")
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(ic.UnaryServer()),
		grpc.ChainStreamInterceptor(ic.StreamServer()),
	)
	_ = srv
}

// Service A: the session it writes with goes with its calls to B, and what
// B writes comes back into it. (Compile-only: it needs a cluster.)
func ExampleUnaryClientInterceptor() {
	db, err := sql.Open("pgreplica", "postgres://app@db1,db2,db3/shop?sslmode=disable")
	if err != nil {
		panic(err)
	}
	cc, err := grpc.NewClient("orders.internal:8443",
		grpc.WithTransportCredentials(insecure.NewCredentials()), // TLS in production
		grpc.WithChainUnaryInterceptor(pgreplicagrpc.UnaryClientInterceptor(sharedOpts)),
		grpc.WithChainStreamInterceptor(pgreplicagrpc.StreamClientInterceptor(sharedOpts)),
	)
	if err != nil {
		panic(err)
	}
	ctx := pgreplica.WithSession(context.Background(), pgreplica.NewSession())

	// B creates the order and hands back its write's token...
	id := new(wrapperspb.StringValue)
	if err := cc.Invoke(ctx, "/shop.Orders/Create", wrapperspb.String("sku-1"), id); err != nil {
		panic(err)
	}
	// ...so A's read sees it: a replica that replayed it, or the primary.
	var status string
	err = db.QueryRowContext(ctx, "SELECT status FROM orders WHERE id = $1", id.GetValue()).Scan(&status)
	_ = err
}
