package pgreplicajob_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/pgreplicajob"
)

// A job message with the producer's token in a field of its payload.
type sendReceipt struct {
	OrderID int64  `json:"order_id"`
	Token   string `json:"pgreplica_token,omitempty"`
}

// A producer and a worker, each with its own *sql.DB (in real life, their
// own processes): the worker finds the order the producer just committed
// even when every replica lags. (Compile-only: it needs a cluster.)
func Example() {
	const dsn = "postgres://app@db1,db2,db3/shop?sslmode=disable"
	key := []byte("a secret of at least 32 random bytes") // the same in producer and worker
	queue := make(chan []byte, 1)                         // stands in for a message broker

	// Producer.
	producerDB, err := sql.Open("pgreplica", dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer producerDB.Close()
	ctx := pgreplica.WithSession(context.Background(), pgreplica.NewSession())
	var orderID int64
	if err := producerDB.QueryRowContext(ctx,
		"INSERT INTO orders (total) VALUES (42) RETURNING id").Scan(&orderID); err != nil {
		log.Fatal(err)
	}
	producer, err := pgreplicajob.New(pgreplicajob.Options{Codec: pgreplica.TokenCodec{Key: key}})
	if err != nil {
		log.Fatal(err)
	}
	msg, _ := json.Marshal(sendReceipt{OrderID: orderID, Token: producer.Inject(ctx)})
	queue <- msg

	// Worker.
	workerDB, err := sql.Open("pgreplica", dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer workerDB.Close()
	var job sendReceipt
	if err := json.Unmarshal(<-queue, &job); err != nil {
		log.Fatal(err)
	}
	worker, err := pgreplicajob.New(pgreplicajob.Options{
		Codec: pgreplica.TokenCodec{Key: key},
		Check: pgreplica.TokenCheck(workerDB), // no position ahead of the primary's
	})
	if err != nil {
		log.Fatal(err)
	}
	wctx, err := worker.Extract(context.Background(), job.Token)
	if err != nil {
		// Forged or expired: this job must not miss the order, so read
		// it on the primary.
		wctx = pgreplica.WithPrimary(context.Background())
	}
	var total int
	err = workerDB.QueryRowContext(wctx, "SELECT total FROM orders WHERE id = $1", job.OrderID).Scan(&total)
	if errors.Is(err, sql.ErrNoRows) {
		log.Fatal("cannot happen: the token makes the read see the insert")
	}
	fmt.Println("receipt for", job.OrderID, "total", total)
}

// The token can also travel in message headers (Kafka, AMQP, NATS and
// most brokers have them).
func ExampleCarrier_InjectHeader() {
	c, err := pgreplicajob.New(pgreplicajob.Options{
		Codec: pgreplica.TokenCodec{Key: []byte("a secret of at least 32 random bytes")},
	})
	if err != nil {
		log.Fatal(err)
	}
	// The producer's write advanced its session; a Merge stands in for it.
	s := pgreplica.NewSession()
	s.Merge(pgreplica.Token{LSN: 0x16_B374D848})
	ctx := pgreplica.WithSession(context.Background(), s)

	headers := map[string]string{"content-type": "application/json"}
	c.InjectHeader(ctx, headers)

	// The worker.
	wctx, err := c.ExtractHeader(context.Background(), headers)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(pgreplica.SessionFrom(wctx).LSN())
	// Output: 16/B374D848
}

// Tokens are signed: a Carrier with another key (or none, told to accept
// unsigned tokens) refuses them, and New refuses to make a Carrier without
// a key unless Unsigned says so.
func ExampleNew() {
	key := []byte("a secret of at least 32 random bytes")
	c, _ := pgreplicajob.New(pgreplicajob.Options{Codec: pgreplica.TokenCodec{Key: key}})
	s := pgreplica.NewSession()
	s.Merge(pgreplica.Token{LSN: 0x2A})
	tok := c.Inject(pgreplica.WithSession(context.Background(), s))

	unsigned, _ := pgreplicajob.New(pgreplicajob.Options{Unsigned: true}) // development only
	_, err := unsigned.Extract(context.Background(), tok)
	fmt.Println(err)
	wctx, err := c.Extract(context.Background(), tok)
	fmt.Println(pgreplica.SessionFrom(wctx).LSN(), err)
	_, err = pgreplicajob.New(pgreplicajob.Options{})
	fmt.Println(errors.Is(err, pgreplica.ErrNoTokenKey))
	// Output:
	// pgreplicajob: job token: pgreplica: bad token: signed token needs a key
	// 0/2A <nil>
	// true
}
