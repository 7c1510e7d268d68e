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
// A Carrier is made by New from Options; it signs tokens with
// Options.Codec.Key, and New refuses a codec without one unless
// Options.Unsigned says unsigned tokens are wanted (for development):
// whoever can write a message could otherwise choose its position.
package pgreplicajob

import (
	"context"
	"errors"
	"fmt"

	"github.com/pgreplica/pgreplica"
)

// DefaultHeader is the message header InjectHeader writes and
// ExtractHeader reads.
const DefaultHeader = "pgreplica-token"

// Options configure a Carrier.
type Options struct {
	// Codec encodes and decodes the tokens: Codec.Key signs them
	// (Codec.PreviousKeys while it rotates) and Codec.TTL makes them
	// expire. Producer and worker need the same Key. New refuses a codec
	// without Key unless Unsigned is set.
	Codec pgreplica.TokenCodec
	// Unsigned lets the Carrier work without Codec.Key: it then writes and
	// accepts unsigned tokens, which whoever writes a message can forge.
	// For development and tests; with Codec.Key set it is an error.
	Unsigned bool
	// Check, when set, is run by Extract on every token once it decoded;
	// a token it returns an error for is refused as one that does not
	// decode. pgreplica.TokenCheck(db) refuses a token with a position
	// ahead of everything the primary has written, or one of other
	// clusters only (another deployment's): set it to that, with every
	// database the workers' sessions use. Without it such a token is
	// taken, and costs the worker's reads no more than a token of the
	// primary's newest write (see pgreplica.Token).
	Check func(ctx context.Context, t pgreplica.Token) error
	// Header is the header key of InjectHeader and ExtractHeader; empty
	// means DefaultHeader.
	Header string
}

// Carrier puts tokens into messages and takes them out. Make one with
// New; the zero Carrier carries nothing (Inject returns "", Extract fails
// with pgreplica.ErrNoTokenKey). A Carrier is safe for concurrent use.
type Carrier struct {
	o    Options
	made bool // by New
}

// New validates opts and returns their Carrier, or an error wrapping
// pgreplica.ErrNoTokenKey when opts.Codec.Key is empty and opts.Unsigned
// is not set.
func New(opts Options) (*Carrier, error) {
	switch {
	case len(opts.Codec.Key) == 0 && !opts.Unsigned:
		return nil, fmt.Errorf("pgreplicajob: Options.Codec.Key is empty and Options.Unsigned is not set: %w", pgreplica.ErrNoTokenKey)
	case len(opts.Codec.Key) > 0 && opts.Unsigned:
		return nil, errors.New("pgreplicajob: Options.Unsigned is set with Options.Codec.Key: choose one")
	}
	if opts.Header == "" {
		opts.Header = DefaultHeader
	}
	return &Carrier{o: opts, made: true}, nil
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
func (c *Carrier) Inject(ctx context.Context) string {
	s := pgreplica.SessionFrom(ctx)
	// LSNFor(0), what a read on a cluster not known must see, is the
	// highest watermark of every cluster: 0 means no position anywhere.
	if !c.made || s.LSNFor(0) == 0 {
		return ""
	}
	return c.o.Codec.SessionToken(s)
}

// Extract returns ctx with the token's requirement: reads through the
// returned context see everything the producer's session wrote before
// Inject, each cluster's position applying to reads on that cluster. The
// token max-merges, per cluster, into the session ctx already carries, or
// into a new session attached to the returned context, so that the
// worker's own writes and replica reads advance it (Inject in the worker
// then passes the chain on). An empty token adds no requirement.
//
// A token that does not decode (garbled, forged, expired) or that
// Options.Check refuses returns ctx unchanged and an error wrapping
// pgreplica.ErrBadToken. A worker that must not miss the producer's rows
// can then read with pgreplica.WithPrimary(ctx); one that may read older
// data can go on with ctx.
func (c *Carrier) Extract(ctx context.Context, token string) (context.Context, error) {
	if !c.made {
		return ctx, fmt.Errorf("pgreplicajob: a Carrier not made by New: %w", pgreplica.ErrNoTokenKey)
	}
	if token == "" {
		return ctx, nil
	}
	tok, err := c.o.Codec.Decode(token)
	if err == nil && c.o.Check != nil {
		err = c.o.Check(ctx, tok)
	}
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

// InjectHeader stores Inject's token in h under Options.Header. It leaves
// h unchanged when there is no token; h must not be nil when there is one.
func (c *Carrier) InjectHeader(ctx context.Context, h map[string]string) {
	if tok := c.Inject(ctx); tok != "" {
		h[c.o.Header] = tok
	}
}

// ExtractHeader is Extract of the token h holds under Options.Header; a
// missing header (or a nil h) adds no requirement.
func (c *Carrier) ExtractHeader(ctx context.Context, h map[string]string) (context.Context, error) {
	return c.Extract(ctx, h[c.o.Header])
}
