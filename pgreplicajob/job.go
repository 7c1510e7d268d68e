// Package pgreplicajob carries pgreplica's read-your-writes guarantee from
// the code that enqueues a job or publishes a message to the worker that
// handles it, in another goroutine, process or machine: "the job can't
// find the row the producer just committed" cannot happen.
//
// The producer writes with a pgreplica.Session in its context (an HTTP
// request's, from pgreplicahttp, or one of its own), then puts Inject's
// string in the message, in a field of the payload or, with InjectHeader,
// in the message's headers. The worker restores it with Extract (or
// ExtractHeader) before it reads: its reads then go to a replica that has
// replayed the producer's writes, or to the primary when none has within
// the driver's wait budget.
//
// The package functions write unsigned tokens without expiry. Use a
// Carrier with a pgreplica.TokenCodec whose Key is set when messages pass
// through hands that should not choose positions.
package pgreplicajob

import (
	"context"
	"fmt"

	"github.com/pgreplica/pgreplica"
)

// DefaultHeader is the message header InjectHeader writes and
// ExtractHeader reads.
const DefaultHeader = "pgreplica-token"

// Carrier puts tokens into messages and takes them out. The zero Carrier
// is what the package functions use.
type Carrier struct {
	// Codec encodes and decodes the tokens: sign them with Codec.Key and
	// make them expire with Codec.TTL. Producer and worker need the same
	// Key.
	Codec pgreplica.TokenCodec
	// Header is the header key of InjectHeader and ExtractHeader; empty
	// means DefaultHeader.
	Header string
}

// Inject returns the token of the session in ctx (see pgreplica.WithSession),
// to be stored in a message: everything the session wrote before the call,
// on every cluster (database) it used, is visible to a reader that Extracts
// it. It returns "" when ctx carries no session or the session has no
// position yet; Extract accepts "".
//
// Writes made without a session in the context (the driver's
// process-wide read-your-writes) are not in the token: produce jobs with a
// session in the context.
func (c Carrier) Inject(ctx context.Context) string {
	s := pgreplica.SessionFrom(ctx)
	// LSNFor(0), what a read on a cluster not known must see, is the
	// highest watermark of every cluster: 0 means no position anywhere.
	if s.LSNFor(0) == 0 {
		return ""
	}
	return c.Codec.SessionToken(s)
}

// Extract returns ctx with the token's requirement: reads through the
// returned context see everything the producer's session wrote before
// Inject, each cluster's position applying to reads on that cluster. The
// token max-merges, per cluster, into the session ctx already carries, or
// into a new session attached to the returned context, so that the
// worker's own writes and replica reads advance it (Inject in the worker
// then passes the chain on). An empty token adds no requirement.
//
// A token that does not decode (garbled, forged, expired) returns ctx
// unchanged and an error wrapping pgreplica.ErrBadToken. A worker that
// must not miss the producer's rows can then read with
// pgreplica.WithPrimary(ctx); one that may read older data can go on with
// ctx.
func (c Carrier) Extract(ctx context.Context, token string) (context.Context, error) {
	if token == "" {
		return ctx, nil
	}
	tok, err := c.Codec.Decode(token)
	if err != nil {
		return ctx, fmt.Errorf("pgreplicajob: job token: %w", err)
	}
	s := pgreplica.SessionFrom(ctx)
	if s == nil {
		s = pgreplica.NewSession()
	}
	if err := s.Merge(tok); err != nil {
		return ctx, fmt.Errorf("pgreplicajob: job token: %w", err)
	}
	return pgreplica.WithSession(ctx, s), nil
}

// InjectHeader stores Inject's token in h under c.Header. It leaves h
// unchanged when there is no token; h must not be nil when there is one.
func (c Carrier) InjectHeader(ctx context.Context, h map[string]string) {
	if tok := c.Inject(ctx); tok != "" {
		h[c.header()] = tok
	}
}

// ExtractHeader is Extract of the token h holds under c.Header; a missing
// header (or a nil h) adds no requirement.
func (c Carrier) ExtractHeader(ctx context.Context, h map[string]string) (context.Context, error) {
	return c.Extract(ctx, h[c.header()])
}

func (c Carrier) header() string {
	if c.Header == "" {
		return DefaultHeader
	}
	return c.Header
}

// Inject is Carrier{}.Inject: the unsigned token of ctx's session.
func Inject(ctx context.Context) string { return Carrier{}.Inject(ctx) }

// Extract is Carrier{}.Extract: it restores an unsigned token.
func Extract(ctx context.Context, token string) (context.Context, error) {
	return Carrier{}.Extract(ctx, token)
}

// InjectHeader is Carrier{}.InjectHeader.
func InjectHeader(ctx context.Context, h map[string]string) { Carrier{}.InjectHeader(ctx, h) }

// ExtractHeader is Carrier{}.ExtractHeader.
func ExtractHeader(ctx context.Context, h map[string]string) (context.Context, error) {
	return Carrier{}.ExtractHeader(ctx, h)
}
