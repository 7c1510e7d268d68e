package pgreplicagrpc

import (
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

// Options configure the interceptors. The zero value carries unsigned
// tokens without expiry under DefaultMetadataKey, ignores bad tokens and
// sends a token back only after a write. Client and server interceptors of
// the services that talk to each other need the same MetadataKey and
// Codec.Key.
type Options struct {
	// MetadataKey is the metadata key of the token; empty means
	// DefaultMetadataKey. gRPC lowercases keys, so it is lowercased here;
	// it must be a valid gRPC metadata key (letters, digits, '-', '_',
	// '.'), must not start with "grpc-" (reserved) and must not end with
	// "-bin" (binary values: the token is text).
	MetadataKey string

	// Codec encodes the tokens the interceptors send and decodes the ones
	// they receive. Set Codec.Key (at least 32 random bytes, the same in
	// every service) so that callers cannot forge positions, and
	// Codec.TTL so that a replayed token stops counting. The zero codec
	// sends and accepts unsigned tokens without expiry.
	Codec pgreplica.TokenCodec

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
// programming errors, reported by the interceptor constructors with a
// panic, as pgreplicahttp.Middleware does.
func (o Options) withDefaults() (Options, error) {
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

// mustOptions returns o with defaults, panicking on invalid options.
func mustOptions(o Options) Options {
	o, err := o.withDefaults()
	if err != nil {
		panic("pgreplicagrpc: " + err.Error())
	}
	return o
}
