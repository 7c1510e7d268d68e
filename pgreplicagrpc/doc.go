// Package pgreplicagrpc carries pgreplica's read-your-writes guarantee
// across gRPC calls: client and server interceptors, unary and streaming,
// that carry a pgreplica.Session's token in the call's metadata.
//
// # The problem it solves
//
// Service A writes a row and calls service B, whose handler reads it from
// a replica that has not replayed the write yet: B answers "not found", or
// with the old value. With the interceptors, A's call carries the token of
// the session A wrote with, B's handler gets a session restored from it,
// and B's reads go to a replica that has replayed A's writes, or to the
// primary when none has within the driver's wait budget. The other way
// round, what B writes comes back to A in the response metadata and is
// merged into A's session, so A's next reads see it. A call without a
// session, or with one that requires nothing yet, carries no token, and
// the handler's reads use any healthy replica.
//
// Handlers need no change beyond passing their context to database/sql or
// their ORM. Install the same Options on both sides:
//
//	ic, err := pgreplicagrpc.New(pgreplicagrpc.Options{
//		Codec: pgreplica.TokenCodec{Key: key, TTL: 10 * time.Minute},
//		Check: pgreplica.TokenCheck(db),
//	})
//	if err != nil {
//		log.Fatal(err) // pgreplica.ErrNoTokenKey without a key
//	}
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(ic.UnaryServer()),
//		grpc.ChainStreamInterceptor(ic.StreamServer()),
//	)
//	cc, err := grpc.NewClient(target, creds,
//		grpc.WithChainUnaryInterceptor(ic.UnaryClient()),
//		grpc.WithChainStreamInterceptor(ic.StreamClient()),
//	)
//
// and call with a session in the context:
//
//	ctx = pgreplica.WithSession(ctx, sess) // or the session of an HTTP request (pgreplicahttp)
//	db.ExecContext(ctx, "INSERT ...")
//	reply, err := client.Get(ctx, req) // B's reads see the insert
//
// # The metadata
//
// The token travels under one metadata key, DefaultMetadataKey
// ("pgreplica-token") unless Options.MetadataKey says otherwise: in the
// request metadata from client to server, and in the response header (or
// the trailer, when the header had already left) from server to client.
// Its value is the text form of a pgreplica.Token, with every cluster's
// position: base64url, at most 298 characters. Several values are
// max-merged per cluster; an empty value counts as absent.
//
// # When the token comes back
//
// When the handler wrote through the session (Session.WriteCount rose), on
// any cluster, whether the call succeeded or failed. The driver also
// advances a session after replica reads (monotonic reads); by default
// (WriteBackOnWrite) such read-only advances are not sent back, so a call
// that only read costs no response metadata. WriteBackAlways sends them
// back too. A token that a call of the handler brought back from a
// further service (through this package's client interceptor, with the
// handler's session) counts as a write, so a write made at the end of a
// chain of calls reaches its start.
//
// A stream's token goes in its response header when the handler wrote
// before the header left (with its first message), and in the trailer
// when it wrote after, or again. The client merges the header when the
// first message arrives and the trailer when the stream ends.
//
// # Signed tokens and bad metadata
//
// Tokens are signed (Options.Codec.Key, the same in every service): New
// refuses options without a key (an error matching
// pgreplica.ErrNoTokenKey) unless Options.Unsigned says unsigned tokens are
// wanted, for development; unsigned, a caller could claim any position.
// UnaryServerInterceptor and the other constructors panic with the same
// error, when the server or connection is built. Codec.TTL makes a token
// stop counting after a while; a token only matters until every replica
// has replayed its positions, which takes milliseconds to seconds.
// Options.Check: pgreplica.TokenCheck(db) refuses a request token with a
// position ahead of everything the primary has written, or of other
// clusters only; whatever a token claims, the driver never waits for a
// position the primary has not written (see pgreplica.Token).
//
// A request token that does not decode (garbled, forged, unsigned where a
// signature is required, expired) or that Check refuses is ignored by
// default, as if the caller had sent none, or fails the call with
// codes.InvalidArgument (Options.BadToken: RejectBadToken). A bad token in
// a response never fails the call, which has already run; it is logged and
// ignored.
//
// # Several databases
//
// One session serves every database (cluster) the handlers use: the
// driver keeps a watermark per cluster, the token carries them all, and
// merging is per cluster (pgreplica.Token.Merge), so a write to a second
// database or another shard is as safe as one to the main database.
//
// For HTTP requests see the sibling package pgreplicahttp, for queue
// messages and background jobs pgreplicajob.
package pgreplicagrpc
