package pgreplicagrpc

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/pgreplica/pgreplica"
)

// DefaultMetadataKey is the metadata key that carries the token when
// Options.MetadataKey is empty: in the request metadata from client to
// server, and in the response header or trailer from server to client. It
// is the header name pgreplicajob uses for messages.
const DefaultMetadataKey = "pgreplica-token"

// BadTokenPolicy says what a server interceptor does with a call whose
// metadata holds a token that does not decode (garbled, forged, unsigned
// where a signature is required, expired, oversized). Neither policy ever
// fails a call with codes.Internal or codes.Unknown.
type BadTokenPolicy uint8

// Bad-token policies.
const (
	// IgnoreBadToken (the default) calls the handler as if the bad token
	// were absent: its reads may miss the writes the token stood for, as
	// they would for a client that sent no token. Valid tokens in other
	// values of the key still count.
	IgnoreBadToken BadTokenPolicy = iota
	// RejectBadToken fails the call with codes.InvalidArgument without
	// calling the handler. The status message says why the token was
	// refused (for example "expired"), never the token itself.
	RejectBadToken
)

// WriteBackPolicy says when a server interceptor hands the session's token
// back to the client.
type WriteBackPolicy uint8

// Write-back policies.
//
// The driver raises a session's watermark after every write and, for
// monotonic reads, after every replica read. gRPC has no safe methods to
// tell reads from writes, so by default only calls that wrote send a token
// back: a read-only call costs no metadata and no position lookup.
const (
	// WriteBackOnWrite (the default) sends the token back when the
	// handler wrote through the session (Session.WriteCount rose), on any
	// cluster, whether the call succeeded or failed: the write committed
	// either way.
	WriteBackOnWrite WriteBackPolicy = iota
	// WriteBackAlways also sends it back when the session advanced
	// without a write (a replica read raised it past what the client
	// sent), so that the client gets monotonic reads across calls. It
	// costs a token in most responses, and for a call that only read
	// from a replica, a position lookup on the primary (shared with
	// other sessions) when the token is built.
	WriteBackAlways
)

// Options configure the interceptors. Codec.Key is required unless
// Unsigned is set; otherwise the zero value carries the token under
// DefaultMetadataKey, ignores bad tokens and sends a token back only after
// a write. Client and server interceptors of the services that talk to
// each other need the same MetadataKey and Codec.Key.
type Options struct {
	// MetadataKey is the metadata key of the token; empty means
	// DefaultMetadataKey. gRPC lowercases keys, so it is lowercased here;
	// it must be a valid gRPC metadata key (letters, digits, '-', '_',
	// '.'), must not start with "grpc-" (reserved) and must not end with
	// "-bin" (binary values: the token is text).
	MetadataKey string

	// Codec encodes the tokens the interceptors send and decodes the ones
	// they receive. Codec.Key (at least 32 random bytes, the same in every
	// service; Codec.PreviousKeys while it rotates) keeps callers from
	// forging positions, and Codec.TTL makes a replayed token stop
	// counting. New refuses a codec without Key unless Unsigned is set.
	Codec pgreplica.TokenCodec
	// Unsigned lets the interceptors run without Codec.Key: they then send
	// and accept unsigned tokens, which any caller can forge. For
	// development and tests; with Codec.Key set it is an error.
	Unsigned bool
	// Check, when set, is run by the server interceptors on every request
	// token once it decoded; a token it returns an error for is a bad
	// token (BadToken says what happens). pgreplica.TokenCheck(db)
	// refuses a token with a position ahead of everything the primary has
	// written, or one of other clusters only (another deployment's): set
	// it to that, with every database the service's sessions use. A
	// service that passes on tokens of databases it does not use itself
	// (a chain of services over different databases) leaves it unset: a
	// token it takes without the check costs its handler's reads no more
	// than a token of the primary's newest write (see pgreplica.Token).
	// Client interceptors do not run it on the tokens services they called
	// send back.
	Check func(ctx context.Context, t pgreplica.Token) error

	// BadToken is the server's policy for request tokens that do not
	// decode; default IgnoreBadToken. Client interceptors never fail a
	// call over a bad token in the response, because the call has already
	// run (failing it would invite a retry of a write): they log it (Warn)
	// and go on without it.
	BadToken BadTokenPolicy
	// WriteBack says when the server hands the token back; default
	// WriteBackOnWrite. Client interceptors ignore it.
	WriteBack WriteBackPolicy

	// Logger receives bad request tokens (Debug: callers send these, and
	// a flood must not fill the logs), bad response tokens (Warn: they
	// come from a service you called, and usually mean a Codec.Key that
	// differs between services) and tokens that could not be sent back
	// (Warn). Nil discards.
	Logger *slog.Logger
}

// withDefaults validates o and fills in the defaults. Invalid options are
// programming errors, reported by New with an error and by the
// interceptor constructors with a panic, as pgreplicahttp.Middleware does.
func (o Options) withDefaults() (Options, error) {
	switch {
	case len(o.Codec.Key) == 0 && !o.Unsigned:
		return o, fmt.Errorf("Options.Codec.Key is empty and Options.Unsigned is not set: %w", pgreplica.ErrNoTokenKey)
	case len(o.Codec.Key) > 0 && o.Unsigned:
		return o, fmt.Errorf("Options.Unsigned is set with Options.Codec.Key: choose one")
	}
	if o.MetadataKey == "" {
		o.MetadataKey = DefaultMetadataKey
	}
	o.MetadataKey = strings.ToLower(o.MetadataKey)
	if err := validKey(o.MetadataKey); err != nil {
		return o, err
	}
	if o.BadToken > RejectBadToken {
		return o, fmt.Errorf("unknown BadToken policy %d", o.BadToken)
	}
	if o.WriteBack > WriteBackAlways {
		return o, fmt.Errorf("unknown WriteBack policy %d", o.WriteBack)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// validKey checks a lowercased metadata key.
func validKey(k string) error {
	switch {
	case strings.HasPrefix(k, "grpc-"):
		return fmt.Errorf("MetadataKey %q: keys starting with \"grpc-\" are reserved for gRPC", k)
	case strings.HasSuffix(k, "-bin"):
		return fmt.Errorf("MetadataKey %q: keys ending in \"-bin\" are binary; the token is text", k)
	case k == "" || k[0] == ':':
		return fmt.Errorf("invalid MetadataKey %q", k)
	}
	for _, c := range []byte(k) {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("invalid MetadataKey %q: only letters, digits, '-', '_' and '.'", k)
		}
	}
	return nil
}

// Interceptors are the four interceptors of one Options, made by New.
type Interceptors struct{ o Options }

// New validates opts and returns their interceptors, or an error: one
// wrapping pgreplica.ErrNoTokenKey when opts.Codec.Key is empty and
// opts.Unsigned is not set (tokens would be unsigned: any caller could
// forge one), others for invalid values (see Options.MetadataKey). The
// package's UnaryServerInterceptor and the others are New's methods,
// panicking on these errors instead.
func New(opts Options) (*Interceptors, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("pgreplicagrpc: %w", err)
	}
	return &Interceptors{o: o}, nil
}

// mustNew is New, panicking on invalid options: when the server or the
// client connection is built, at start-up.
func mustNew(o Options) *Interceptors {
	ic, err := New(o)
	if err != nil {
		panic(err)
	}
	return ic
}
