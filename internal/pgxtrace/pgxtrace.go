// Package pgxtrace stands between an application's pgx tracer
// (pgx.ConnConfig.Tracer) and the connections pgreplica opens, so that
// the tracer sees what the application sent, as pgxpool would show it:
//
//   - pgreplica's own statements are not traced: the monitor's (its
//     probes, its captures of write positions, on its own connections
//     and on idle pooled ones), which run every few hundred milliseconds
//     on every server and would flood the traces, and those it sends on
//     the application's connections (which server a new one reached, a
//     replay check or a wait before a read);
//   - a read pgreplica sends in one flight behind its replay check (a pgx
//     batch of the check and the query, or a pipeline) is traced as the
//     application's call alone: a Query as a query, a batch as the
//     batch, the check left out;
//   - a statement pgreplica sends through pgconn (a pipeline, which pgx
//     does not trace) is traced through StartQuery.
//
// Everything else is handed to the application's tracer unchanged. A
// connection whose tracer is not wrapped (none set) costs nothing.
package pgxtrace

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Tracer wraps an application's tracer. It implements every tracer
// interface of pgx and passes each call to the application's tracer when
// that implements the interface.
type Tracer struct {
	query   pgx.QueryTracer
	batch   pgx.BatchTracer
	copy    pgx.CopyFromTracer
	prepare pgx.PrepareTracer
	connect pgx.ConnectTracer
}

var (
	_ pgx.QueryTracer    = (*Tracer)(nil)
	_ pgx.BatchTracer    = (*Tracer)(nil)
	_ pgx.CopyFromTracer = (*Tracer)(nil)
	_ pgx.PrepareTracer  = (*Tracer)(nil)
	_ pgx.ConnectTracer  = (*Tracer)(nil)
)

// Wrap returns t wrapped (t itself when it is wrapped already, nil for
// nil).
func Wrap(t pgx.QueryTracer) pgx.QueryTracer {
	if t == nil {
		return nil
	}
	if w, ok := t.(*Tracer); ok {
		return w
	}
	w := &Tracer{query: t}
	w.batch, _ = t.(pgx.BatchTracer)
	w.copy, _ = t.(pgx.CopyFromTracer)
	w.prepare, _ = t.(pgx.PrepareTracer)
	w.connect, _ = t.(pgx.ConnectTracer)
	return w
}

// App returns the application's tracer t wraps.
func (t *Tracer) App() pgx.QueryTracer { return t.query }

// Of returns the wrapped tracer of a connection's configuration, or
// nil. (pgx.Conn.Config copies the configuration: ask once per
// connection.)
func Of(cfg *pgx.ConnConfig) *Tracer {
	t, _ := cfg.Tracer.(*Tracer)
	return t
}

type ownKey struct{}

// Own marks ctx as pgreplica's own: nothing done under it is traced, and
// no AfterConnect runs on a connection opened under it (the monitor's).
func Own(ctx context.Context) context.Context {
	if IsOwn(ctx) {
		return ctx
	}
	return context.WithValue(ctx, ownKey{}, true)
}

// IsOwn reports whether ctx is pgreplica's own (Own).
func IsOwn(ctx context.Context) bool {
	v, _ := ctx.Value(ownKey{}).(bool)
	return v
}

// ErrDropped is the error a traced attempt ends with when pgreplica
// dropped its results unseen (Flight.Drop), joined with the reason.
var ErrDropped = errors.New("pgreplica: the read's results were dropped; it went elsewhere")

// Flight is one pgx batch pgreplica sends for the application's call
// with its replay check queued first: the tracer shows the call alone.
type Flight struct {
	// batch is the application's batch; nil: the call is a query, the
	// batch's second statement.
	batch   *pgx.Batch
	state   uint8
	queries int // batch queries read so far, the check included
	tag     pgconn.CommandTag
	err     error
	dropped error
}

const (
	flightPending uint8 = iota
	flightActive
	flightDone
)

type flightKey struct{}

// Flight marks the batch sent next under the returned context, on the
// connection t traces, as a flight for the application's call: a Query
// when appBatch is nil, else appBatch. A nil t (the connection traces
// nothing) returns ctx and a nil flight.
func (t *Tracer) Flight(ctx context.Context, appBatch *pgx.Batch) (context.Context, *Flight) {
	if t == nil {
		return ctx, nil
	}
	f := &Flight{batch: appBatch}
	return context.WithValue(ctx, flightKey{}, f), f
}

// Drop records that pgreplica dropped the flight's results (the replica
// was behind): the traced call ends with ErrDropped and why. f may be nil.
func (f *Flight) Drop(why error) {
	if f != nil {
		f.dropped = errors.Join(ErrDropped, why)
	}
}

// active returns the flight ctx carries while its batch is traced.
func active(ctx context.Context) *Flight {
	f, _ := ctx.Value(flightKey{}).(*Flight)
	if f == nil || f.state != flightActive {
		return nil
	}
	return f
}

func (t *Tracer) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if IsOwn(ctx) {
		return ctx
	}
	return t.query.TraceQueryStart(ctx, conn, data)
}

func (t *Tracer) TraceQueryEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryEndData) {
	if IsOwn(ctx) {
		return
	}
	t.query.TraceQueryEnd(ctx, conn, data)
}

func (t *Tracer) TraceBatchStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	if IsOwn(ctx) {
		return ctx
	}
	if f, _ := ctx.Value(flightKey{}).(*Flight); f != nil && f.state == flightPending {
		f.state = flightActive
		if f.batch == nil {
			var q pgx.TraceQueryStartData
			if data.Batch != nil && len(data.Batch.QueuedQueries) > 1 {
				qq := data.Batch.QueuedQueries[1]
				q = pgx.TraceQueryStartData{SQL: qq.SQL, Args: qq.Arguments}
			}
			return t.query.TraceQueryStart(ctx, conn, q)
		}
		data.Batch = f.batch
	}
	if t.batch == nil {
		return ctx
	}
	return t.batch.TraceBatchStart(ctx, conn, data)
}

func (t *Tracer) TraceBatchQuery(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchQueryData) {
	if IsOwn(ctx) {
		return
	}
	if f := active(ctx); f != nil {
		f.queries++
		switch {
		case f.queries == 1:
			return // the replay check
		case f.batch == nil:
			f.tag, f.err = data.CommandTag, data.Err
			return
		}
	}
	if t.batch != nil {
		t.batch.TraceBatchQuery(ctx, conn, data)
	}
}

func (t *Tracer) TraceBatchEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchEndData) {
	if IsOwn(ctx) {
		return
	}
	if f := active(ctx); f != nil {
		f.state = flightDone
		if f.batch == nil {
			t.query.TraceQueryEnd(ctx, conn, pgx.TraceQueryEndData{CommandTag: f.tag, Err: firstErr(f.dropped, f.err, data.Err)})
			return
		}
		data.Err = firstErr(f.dropped, data.Err)
	}
	if t.batch != nil {
		t.batch.TraceBatchEnd(ctx, conn, data)
	}
}

func (t *Tracer) TraceCopyFromStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceCopyFromStartData) context.Context {
	if t.copy == nil || IsOwn(ctx) {
		return ctx
	}
	return t.copy.TraceCopyFromStart(ctx, conn, data)
}

func (t *Tracer) TraceCopyFromEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceCopyFromEndData) {
	if t.copy != nil && !IsOwn(ctx) {
		t.copy.TraceCopyFromEnd(ctx, conn, data)
	}
}

func (t *Tracer) TracePrepareStart(ctx context.Context, conn *pgx.Conn, data pgx.TracePrepareStartData) context.Context {
	if t.prepare == nil || IsOwn(ctx) {
		return ctx
	}
	return t.prepare.TracePrepareStart(ctx, conn, data)
}

func (t *Tracer) TracePrepareEnd(ctx context.Context, conn *pgx.Conn, data pgx.TracePrepareEndData) {
	if t.prepare != nil && !IsOwn(ctx) {
		t.prepare.TracePrepareEnd(ctx, conn, data)
	}
}

func (t *Tracer) TraceConnectStart(ctx context.Context, data pgx.TraceConnectStartData) context.Context {
	if t.connect == nil || IsOwn(ctx) {
		return ctx
	}
	return t.connect.TraceConnectStart(ctx, data)
}

func (t *Tracer) TraceConnectEnd(ctx context.Context, data pgx.TraceConnectEndData) {
	if t.connect != nil && !IsOwn(ctx) {
		t.connect.TraceConnectEnd(ctx, data)
	}
}

// Span is a query StartQuery traced; End it once answered.
type Span struct {
	t    *Tracer
	ctx  context.Context
	conn *pgx.Conn
}

// StartQuery traces sql, which pgreplica sends on conn (which t traces)
// through pgconn for the application, as pgx traces a query: call it
// before sending and End the span once answered. It returns ctx and a nil
// span (whose End does nothing) for a nil t or pgreplica's own ctx;
// otherwise the context the application's tracer returned, under which
// the statement should be sent.
func (t *Tracer) StartQuery(ctx context.Context, conn *pgx.Conn, sql string, args []any) (context.Context, *Span) {
	if t == nil || IsOwn(ctx) {
		return ctx, nil
	}
	ctx = t.query.TraceQueryStart(ctx, conn, pgx.TraceQueryStartData{SQL: sql, Args: args})
	return ctx, &Span{t: t, ctx: ctx, conn: conn}
}

// End ends the span with the statement's command tag and error; once.
func (s *Span) End(tag pgconn.CommandTag, err error) {
	if s == nil || s.t == nil {
		return
	}
	s.t.query.TraceQueryEnd(s.ctx, s.conn, pgx.TraceQueryEndData{CommandTag: tag, Err: err})
	s.t = nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
