package pgreplicajobtest

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration"
	"github.com/pgreplica/pgreplica/pgreplicajob"
)

var cluster *integration.Cluster

func TestMain(m *testing.M) {
	os.Exit(integration.Main(m, integration.Options{Replicas: 2}, &cluster))
}

func openDB(t *testing.T, name string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgreplica", cluster.DSN()+"&application_name="+name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestProducerWorker: a worker with its own *sql.DB finds the row the
// producer committed while replay is paused on every replica, because the
// message carries the producer's token; without it the worker reads a
// replica that does not have the row.
func TestProducerWorker(t *testing.T) {
	cluster.Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	producer := openDB(t, "producer")
	worker := openDB(t, "worker")
	if _, err := producer.ExecContext(ctx, "DROP TABLE IF EXISTS jobs_orders; CREATE TABLE jobs_orders (id serial PRIMARY KEY, total int)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cluster.Exec(context.Background(), cluster.Primary(), "DROP TABLE IF EXISTS jobs_orders") })
	if err := cluster.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	if err := worker.PingContext(ctx); err != nil { // the worker knows the topology before the pause
		t.Fatal(err)
	}
	cluster.PauseReplicas(t)

	type message struct {
		OrderID int    `json:"order_id"`
		Token   string `json:"token"`
	}
	codec := pgreplica.TokenCodec{Key: []byte("0123456789abcdef0123456789abcdef"), TTL: time.Minute}
	producerCarrier, err := pgreplicajob.New(pgreplicajob.Options{Codec: codec})
	if err != nil {
		t.Fatal(err)
	}
	workerCarrier, err := pgreplicajob.New(pgreplicajob.Options{Codec: codec, Check: pgreplica.TokenCheck(worker)})
	if err != nil {
		t.Fatal(err)
	}
	pctx := pgreplica.WithSession(ctx, pgreplica.NewSession())
	var id int
	if err := producer.QueryRowContext(pctx, "INSERT INTO jobs_orders (total) VALUES (42) RETURNING id").Scan(&id); err != nil {
		t.Fatal(err)
	}
	wire, _ := json.Marshal(message{OrderID: id, Token: producerCarrier.Inject(pctx)})

	var msg message
	if err := json.Unmarshal(wire, &msg); err != nil {
		t.Fatal(err)
	}
	const q = "SELECT total, pg_is_in_recovery() FROM jobs_orders WHERE id = $1"
	wctx, err := workerCarrier.Extract(ctx, msg.Token)
	if err != nil {
		t.Fatal(err)
	}
	var total int
	var onReplica bool
	if err := worker.QueryRowContext(wctx, q, msg.OrderID).Scan(&total, &onReplica); err != nil {
		t.Fatalf("worker with the token, replay paused: %v", err)
	}
	if total != 42 || onReplica {
		t.Fatalf("worker read total %d on a replica: %v", total, onReplica)
	}
	// The message without its token: the worker (which wrote nothing)
	// reads a replica, which has not replayed the insert.
	err = worker.QueryRowContext(pgreplica.WithEventual(ctx), q, msg.OrderID).Scan(&total, &onReplica)
	if !errors.Is(err, sql.ErrNoRows) {
		t.Fatalf("worker without the token: %v, want no rows from a paused replica", err)
	}
	// The same through headers.
	h := map[string]string{}
	producerCarrier.InjectHeader(pctx, h)
	hctx, err := workerCarrier.ExtractHeader(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	if err := worker.QueryRowContext(hctx, q, msg.OrderID).Scan(&total, &onReplica); err != nil || onReplica {
		t.Fatalf("worker with the header token: %v (replica %v)", err, onReplica)
	}
}
