package pgreplicapgx_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/pgreplicapgx"
)

// A program written for pgxpool switches by its constructor: the rest of
// its code (here, what sqlc's generated Queries do through DBTX) stays.
func Example() {
	ctx := context.Background()
	// Was: pool, err := pgxpool.New(ctx, "postgres://app@db1/shop")
	pool, err := pgreplicapgx.New(ctx, "postgres://app@db1,db2,db3/shop?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	// queries := db.New(pool) // sqlc's generated package takes the pool as its DBTX
	var id int64
	if err := pool.QueryRow(ctx, "INSERT INTO items (name) VALUES ($1) RETURNING id", "pen").Scan(&id); err != nil {
		log.Fatal(err)
	}
	// The next read sees the write, from a replica once one has replayed
	// it, else from the primary.
	var name string
	if err := pool.QueryRow(ctx, "SELECT name FROM items WHERE id = $1", id).Scan(&name); err != nil {
		log.Fatal(err)
	}
}

// Bad input fails with pgreplica's typed errors, before anything connects.
func ExampleNew() {
	ctx := context.Background()
	_, err := pgreplicapgx.New(ctx, "postgres://db1,db2/shop?pgreplica_wait_bugdet=1s")
	fmt.Println(errors.Is(err, pgreplica.ErrUnknownOption))
	_, err = pgreplicapgx.New(ctx, "postgres://db1,db2/shop?pgreplica_driver=pq")
	fmt.Println(errors.Is(err, pgreplica.ErrBadConfig))
	// Output:
	// true
	// true
}

// A Session in the context gives one user's reads read-your-writes and
// monotonic reads, as with the database/sql driver.
func ExamplePool_Query() {
	ctx := context.Background()
	pool, err := pgreplicapgx.New(ctx, "postgres://app@db1,db2,db3/shop")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	sctx := pgreplica.WithSession(ctx, pgreplica.NewSession())
	rows, err := pool.Query(sctx, "SELECT id, name FROM items ORDER BY id")
	if err != nil {
		log.Fatal(err)
	}
	type item struct {
		ID   int64
		Name string
	}
	items, err := pgx.CollectRows(rows, pgx.RowToStructByName[item])
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(items))
}

// A batch of reads goes to one replica in one flight; a batch with a write
// goes to the primary and is recorded once.
func ExamplePool_SendBatch() {
	ctx := context.Background()
	pool, err := pgreplicapgx.New(ctx, "postgres://app@db1,db2,db3/shop")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	b := &pgx.Batch{}
	b.Queue("UPDATE items SET stock = stock - 1 WHERE id = $1", 7)
	b.Queue("INSERT INTO orders (item) VALUES ($1)", 7)
	if err := pool.SendBatch(ctx, b).Close(); err != nil {
		log.Fatal(err)
	}
}

// A read-only transaction runs on one replica that has what the context
// needs.
func ExamplePool_BeginTx() {
	ctx := context.Background()
	pool, err := pgreplicapgx.New(ctx, "postgres://app@db1,db2,db3/shop")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead})
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var orders, items int
	if err := tx.QueryRow(ctx, "SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM items)").Scan(&orders, &items); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
}

// Session state (LISTEN, SET, advisory locks) lives on a connection held
// with Acquire; after Release it is closed, not reused.
func ExamplePool_Acquire() {
	ctx := context.Background()
	pool, err := pgreplicapgx.New(ctx, "postgres://app@db1,db2,db3/shop")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	c, err := pool.Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Release()
	if _, err := c.Exec(ctx, "LISTEN orders"); err != nil {
		log.Fatal(err)
	}
	n, err := c.Conn().WaitForNotification(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(n.Payload)
}
