package clustertest

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration/itest"
	"github.com/pgreplica/pgreplica/pgreplicagrpc"
	"github.com/pgreplica/pgreplica/pgreplicagrpc/internal/testservice"
)

// opts are the interceptors' options, the same in both services: signed,
// expiring tokens, bad ones rejected, the default write-back policy (only
// after a write).
var opts = pgreplicagrpc.Options{
	Codec:    pgreplica.TokenCodec{Key: bytes.Repeat([]byte("k"), 32), TTL: time.Minute},
	BadToken: pgreplicagrpc.RejectBadToken,
}

func ctxFor(t *testing.T) context.Context { return itest.Ctx(t, time.Minute) }

// openDB returns a pgreplica *sql.DB on the shared cluster, closed with t.
func openDB(t *testing.T) *sql.DB {
	t.Helper()
	cluster.Need(t)
	db, _ := itest.Open(t, cluster.DSN()+"&application_name=pgreplicagrpc_test")
	return db
}

// itemsTable creates a fresh table for t on the primary.
func itemsTable(t *testing.T, db *sql.DB) string {
	t.Helper()
	name := "items_" + strings.ToLower(strings.NewReplacer("/", "_", "#", "_").Replace(t.Name()))
	if _, err := db.ExecContext(ctxFor(t), fmt.Sprintf("DROP TABLE IF EXISTS %[1]s; CREATE TABLE %[1]s (id serial PRIMARY KEY, v text)", name)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cluster.Exec(context.Background(), cluster.Primary(), "DROP TABLE IF EXISTS "+name) })
	return name
}

// pauseReplicas pauses replay on every replica once they have caught up
// (so the table exists there); the returned function resumes it and waits
// until every replica has replayed everything committed before.
func pauseReplicas(t *testing.T) (resume func()) {
	t.Helper()
	if err := cluster.WaitCaughtUp(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	r := cluster.PauseReplicas(t)
	return func() {
		t.Helper()
		r()
		if err := cluster.WaitCaughtUp(ctxFor(t)); err != nil {
			t.Fatal(err)
		}
	}
}

// answer is what a read or a write returned, and the node that ran it.
type answer struct {
	value string // the row's value, "" when the node did not have it; a put's id
	node  int
}

func (a answer) String() string { return fmt.Sprintf("%q from node %d", a.value, a.node) }

func (a answer) onPrimary() bool { return a.node == cluster.Primary() }

// encode and decode carry an answer in a message.
func (a answer) encode() string { return a.value + "@" + strconv.Itoa(cluster.Port(a.node)) }

func decode(t *testing.T, s string) answer {
	t.Helper()
	i := strings.LastIndexByte(s, '@')
	port, err := strconv.Atoi(s[i+1:])
	if i < 0 || err != nil {
		t.Fatalf("answer %q", s)
	}
	n := cluster.NodeAt(port)
	if n < 0 {
		t.Fatalf("port %d is no node of the cluster", port)
	}
	return answer{s[:i], n}
}

// get reads item id through ctx.
func get(ctx context.Context, db *sql.DB, table, id string) (answer, error) {
	var v sql.NullString
	var port int
	err := db.QueryRowContext(ctx,
		"SELECT (SELECT v FROM "+table+" WHERE id = $1), inet_server_port()", id).Scan(&v, &port)
	return answer{v.String, cluster.NodeAt(port)}, err
}

// put inserts an item through ctx; the answer's value is its id.
func put(ctx context.Context, db *sql.DB, table, v string) (answer, error) {
	var id, port int
	err := db.QueryRowContext(ctx,
		"INSERT INTO "+table+" (v) VALUES ($1) RETURNING id, inet_server_port()", v).Scan(&id, &port)
	return answer{strconv.Itoa(id), cluster.NodeAt(port)}, err
}

// serviceB starts service B with the interceptors on a real gRPC server
// (in-process, over bufconn) and returns a client with the client
// interceptors, for service A. B's requests are "get:ID", "put:VALUE" and
// "via:REQUEST", for which B calls itself, standing in for a third
// service, with its handler's context and answers what that call answered.
// Every message of B's stream is a request, answered in turn.
func serviceB(t *testing.T, db *sql.DB, table string) *grpc.ClientConn {
	var self *grpc.ClientConn
	handle := func(ctx context.Context, req string) (string, error) {
		op, arg, _ := strings.Cut(req, ":")
		var a answer
		var err error
		switch op {
		case "get":
			a, err = get(ctx, db, table, arg)
		case "put":
			a, err = put(ctx, db, table, arg)
		case "via":
			return testservice.Unary(ctx, self, arg)
		default:
			err = fmt.Errorf("unknown request %q", req)
		}
		if err != nil {
			t.Errorf("B: %s: %v", req, err)
			return "", err
		}
		return a.encode(), nil
	}
	self = testservice.Serve(t, &testservice.Handlers{
		Unary: handle,
		Stream: func(stream grpc.ServerStream) error {
			for {
				req, err := testservice.Recv(stream)
				if err == io.EOF {
					return nil
				} else if err != nil {
					return err
				}
				out, err := handle(stream.Context(), req)
				if err != nil {
					return err
				}
				if err := testservice.Send(stream, out); err != nil {
					return err
				}
			}
		},
	}, []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(pgreplicagrpc.UnaryServerInterceptor(opts)),
		grpc.ChainStreamInterceptor(pgreplicagrpc.StreamServerInterceptor(opts)),
	},
		grpc.WithChainUnaryInterceptor(pgreplicagrpc.UnaryClientInterceptor(opts)),
		grpc.WithChainStreamInterceptor(pgreplicagrpc.StreamClientInterceptor(opts)),
	)
	return self
}

// call calls B.
func call(t *testing.T, ctx context.Context, b *grpc.ClientConn, req string) answer {
	t.Helper()
	out, err := testservice.Unary(ctx, b, req)
	if err != nil {
		t.Fatalf("calling B with %q: %v", req, err)
	}
	return decode(t, out)
}

// TestAWritesBReads: service A writes with a session and calls service B,
// whose handler reads the row with the session restored from the call's
// metadata: while every replica's replay is paused the read succeeds on
// the primary, and a call without the session reads a replica, which does
// not have the row. Once replay resumed, B's reads with the session go to
// a replica.
func TestAWritesBReads(t *testing.T) {
	db := openDB(t)
	table := itemsTable(t, db)
	b := serviceB(t, db, table)
	resume := pauseReplicas(t)

	sess := pgreplica.NewSession()
	ctx := pgreplica.WithSession(ctxFor(t), sess)
	w, err := put(ctx, db, table, "from A")
	if err != nil || !w.onPrimary() {
		t.Fatalf("A's write: %v, %v", w, err)
	}

	if got := call(t, ctx, b, "get:"+w.value); got.value != "from A" || !got.onPrimary() {
		t.Fatalf("B with A's session, replay paused: %v, want the row from the primary", got)
	}
	if got := call(t, ctxFor(t), b, "get:"+w.value); got.value != "" || got.onPrimary() {
		t.Fatalf("B without a session: %v, want no row from a replica", got)
	}
	// B only read: nothing came back, A's session is where A's write left it.
	if sess.WriteCount() != 1 {
		t.Fatalf("A's session counts %d writes", sess.WriteCount())
	}
	// A token signed with another key is rejected.
	forged := pgreplica.TokenCodec{Key: bytes.Repeat([]byte("x"), 32)}.SessionToken(sess)
	_, err = testservice.Unary(metadata.AppendToOutgoingContext(ctxFor(t), pgreplicagrpc.DefaultMetadataKey, forged), b, "get:"+w.value)
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("forged token: %v, want InvalidArgument", err)
	}

	resume()
	for i := range 3 {
		if got := call(t, ctx, b, "get:"+w.value); got.value != "from A" || got.onPrimary() {
			t.Fatalf("B with A's session after replay resumed (call %d): %v, want the row from a replica", i, got)
		}
	}
}

// TestBWritesAReads: B writes in a call of A's; the write's token comes
// back in the response and into A's session, so A's own reads, and B's in
// A's next call, see it on the primary while replay is paused, and on a
// replica once it resumed. A write at the end of a chain of calls (A calls
// B, which calls C) comes back the same way.
func TestBWritesAReads(t *testing.T) {
	db := openDB(t)
	table := itemsTable(t, db)
	b := serviceB(t, db, table)
	resume := pauseReplicas(t)

	for _, via := range []string{"", "via:"} {
		sess := pgreplica.NewSession()
		ctx := pgreplica.WithSession(ctxFor(t), sess)
		w := call(t, ctx, b, via+"put:from B")
		if !w.onPrimary() {
			t.Fatalf("%sput: %v", via, w)
		}
		if sess.WriteCount() != 0 || sess.LSN() == 0 {
			t.Fatalf("%sput: A's session %+v (writes %d), want B's position and no write of A's", via, sess.Snapshot(), sess.WriteCount())
		}
		got, err := get(ctx, db, table, w.value)
		if err != nil || got.value != "from B" || !got.onPrimary() {
			t.Fatalf("%sput: A's read: %v, %v, want the row from the primary", via, got, err)
		}
		if got := call(t, ctx, b, "get:"+w.value); got.value != "from B" || !got.onPrimary() {
			t.Fatalf("%sput: B's read in A's next call: %v, want the row from the primary", via, got)
		}
		if got, err := get(pgreplica.WithSession(ctxFor(t), pgreplica.NewSession()), db, table, w.value); err != nil || got.value != "" || got.onPrimary() {
			t.Fatalf("%sput: a read without the token: %v, %v, want no row from a replica", via, got, err)
		}
	}

	resume()
	sess := pgreplica.NewSession()
	ctx := pgreplica.WithSession(ctxFor(t), sess)
	w := call(t, ctx, b, "put:after resume")
	if err := cluster.WaitCaughtUp(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	if got, err := get(ctx, db, table, w.value); err != nil || got.value != "after resume" || got.onPrimary() {
		t.Fatalf("A's read after replay resumed: %v, %v, want the row from a replica", got, err)
	}
}

// TestStream: a stream carries A's session to B, and B's writes back: one
// made before B's first answer comes back with that answer (the response
// header), while the stream is still open; one made after, at the end of
// the stream (the trailer).
func TestStream(t *testing.T) {
	db := openDB(t)
	table := itemsTable(t, db)
	b := serviceB(t, db, table)
	resume := pauseReplicas(t)

	sess := pgreplica.NewSession()
	ctx := pgreplica.WithSession(ctxFor(t), sess)
	a, err := put(ctx, db, table, "from A")
	if err != nil {
		t.Fatal(err)
	}
	st, err := testservice.Stream(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	exchange := func(req string) answer {
		t.Helper()
		if err := testservice.Send(st, req); err != nil {
			t.Fatal(err)
		}
		out, err := testservice.Recv(st)
		if err != nil {
			t.Fatalf("stream: %s: %v", req, err)
		}
		return decode(t, out)
	}

	first := exchange("put:first")
	if got, err := get(ctx, db, table, first.value); err != nil || got.value != "first" || !got.onPrimary() {
		t.Fatalf("A's read of B's first write, stream open: %v, %v, want the row from the primary", got, err)
	}
	if got := exchange("get:" + a.value); got.value != "from A" || !got.onPrimary() {
		t.Fatalf("B's read of A's write in the stream: %v, want the row from the primary", got)
	}
	second := exchange("put:second")
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := testservice.Recv(st); !errors.Is(err, io.EOF) {
		t.Fatalf("end of stream: %v", err)
	}
	if got, err := get(ctx, db, table, second.value); err != nil || got.value != "second" || !got.onPrimary() {
		t.Fatalf("A's read of B's second write, stream ended: %v, %v, want the row from the primary", got, err)
	}

	resume()
	if got, err := get(ctx, db, table, second.value); err != nil || got.value != "second" || got.onPrimary() {
		t.Fatalf("A's read after replay resumed: %v, %v, want the row from a replica", got, err)
	}
}
