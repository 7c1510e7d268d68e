package pgxtrace

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// recorder is an application's tracer: it writes down every call.
type recorder struct{ calls []string }

func (r *recorder) add(format string, args ...any) {
	r.calls = append(r.calls, fmt.Sprintf(format, args...))
}

func (r *recorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.add("query start %s %v", d.SQL, d.Args)
	return ctx
}

func (r *recorder) TraceQueryEnd(_ context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	r.add("query end %s %v", d.CommandTag, d.Err)
}

// batchRecorder also traces batches.
type batchRecorder struct{ recorder }

func (r *batchRecorder) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	r.add("batch start %d", d.Batch.Len())
	return ctx
}

func (r *batchRecorder) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	r.add("batch query %s %s", d.SQL, d.CommandTag)
}

func (r *batchRecorder) TraceBatchEnd(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchEndData) {
	r.add("batch end %v", d.Err)
}

// sendBatch traces b as pgx traces a batch whose results are read in
// order.
func sendBatch(ctx context.Context, t pgx.BatchTracer, b *pgx.Batch, tags []string, end error) {
	ctx = t.TraceBatchStart(ctx, nil, pgx.TraceBatchStartData{Batch: b})
	for i, q := range b.QueuedQueries {
		t.TraceBatchQuery(ctx, nil, pgx.TraceBatchQueryData{SQL: q.SQL, CommandTag: pgconn.NewCommandTag(tags[i])})
	}
	t.TraceBatchEnd(ctx, nil, pgx.TraceBatchEndData{Err: end})
}

func batchOf(sqls ...string) *pgx.Batch {
	b := &pgx.Batch{}
	for _, s := range sqls {
		b.Queue(s, 1)
	}
	return b
}

func check(t *testing.T, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("traced\n%q\nwant\n%q", got, want)
	}
}

// TestGuardedQueryTracedAsQuery: a query sent behind its replay check is
// traced as the query alone, to a tracer of queries only and to one of
// batches too; a dropped attempt ends with ErrDropped.
func TestGuardedQueryTracedAsQuery(t *testing.T) {
	for _, app := range []interface {
		pgx.QueryTracer
		got() []string
	}{&queryOnly{}, &batchRecorderGot{}} {
		w := Wrap(app).(*Tracer)
		ctx, _ := w.Flight(context.Background(), nil)
		sendBatch(ctx, w, batchOf("SELECT replay", "SELECT name"), []string{"SELECT 1", "SELECT 3"}, nil)
		ctx, f := w.Flight(context.Background(), nil)
		f.Drop(errors.New("behind"))
		sendBatch(ctx, w, batchOf("SELECT replay", "SELECT name"), []string{"SELECT 1", "SELECT 3"}, nil)
		check(t, app.got(), []string{
			"query start SELECT name [1]", "query end SELECT 3 <nil>",
			"query start SELECT name [1]", "query end SELECT 3 " + ErrDropped.Error() + "\nbehind",
		})
	}
}

type queryOnly struct{ recorder }

func (r *queryOnly) got() []string { return r.calls }

type batchRecorderGot struct{ batchRecorder }

func (r *batchRecorderGot) got() []string { return r.calls }

// TestGuardedBatchTracedAsBatch: the application's batch, sent behind the
// check, is traced as the application's batch (its length, its queries),
// and an ordinary batch passes unchanged.
func TestGuardedBatchTracedAsBatch(t *testing.T) {
	app := &batchRecorder{}
	w := Wrap(app).(*Tracer)
	appBatch := batchOf("SELECT a", "SELECT b")
	ctx, _ := w.Flight(context.Background(), appBatch)
	sendBatch(ctx, w, batchOf("SELECT replay", "SELECT a", "SELECT b"), []string{"SELECT 1", "SELECT 1", "SELECT 2"}, nil)
	sendBatch(context.Background(), w, batchOf("SELECT c"), []string{"SELECT 1"}, nil)
	check(t, app.calls, []string{
		"batch start 2", "batch query SELECT a SELECT 1", "batch query SELECT b SELECT 2", "batch end <nil>",
		"batch start 1", "batch query SELECT c SELECT 1", "batch end <nil>",
	})
}

// TestMonitorNotTraced: nothing under the monitor's context reaches the
// application's tracer, whatever the call.
func TestMonitorNotTraced(t *testing.T) {
	app := &batchRecorder{}
	w := Wrap(app).(*Tracer)
	ctx := Own(context.Background())
	w.TraceQueryEnd(w.TraceQueryStart(ctx, nil, pgx.TraceQueryStartData{SQL: "SELECT probe"}), nil, pgx.TraceQueryEndData{})
	sendBatch(ctx, w, batchOf("SELECT probe"), []string{"SELECT 1"}, nil)
	w.TraceConnectEnd(w.TraceConnectStart(ctx, pgx.TraceConnectStartData{}), pgx.TraceConnectEndData{})
	_, span := w.StartQuery(ctx, nil, "BEGIN", nil)
	span.End(pgconn.CommandTag{}, nil)
	check(t, app.calls, nil)

	w.TraceQueryEnd(w.TraceQueryStart(context.Background(), nil, pgx.TraceQueryStartData{SQL: "SELECT app"}), nil, pgx.TraceQueryEndData{})
	_, span = w.StartQuery(context.Background(), nil, "BEGIN", nil)
	span.End(pgconn.NewCommandTag("BEGIN"), nil)
	span.End(pgconn.NewCommandTag("BEGIN"), nil) // once
	check(t, app.calls, []string{"query start SELECT app []", "query end  <nil>", "query start BEGIN []", "query end BEGIN <nil>"})
}

// TestNilTracer: a connection without the application's tracer costs
// nothing: no flight, no span.
func TestNilTracer(t *testing.T) {
	var w *Tracer
	ctx := context.Background()
	if c, f := w.Flight(ctx, nil); c != ctx || f != nil {
		t.Errorf("Flight on nil: %v %v", c, f)
	}
	if c, s := w.StartQuery(ctx, nil, "BEGIN", nil); c != ctx || s != nil {
		t.Errorf("StartQuery on nil: %v %v", c, s)
	}
	var f *Flight
	f.Drop(errors.New("x"))
	if Wrap(nil) != nil {
		t.Error("Wrap(nil) is not nil")
	}
	app := &recorder{}
	if w := Wrap(app); Wrap(w) != w || w.(*Tracer).App() != app {
		t.Error("Wrap of a wrapped tracer wraps it again")
	}
}
