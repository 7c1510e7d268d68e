package pgreplicapgx_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/tracelog"

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

// A program written for pgxpool with a tracer, types registered on each
// connection and a password fetched per connection switches by its
// package name alone: ParseConfig, the hooks, NewWithConfig. Every
// connection of the application's statements runs them, on the primary
// and on the replicas.
func Example_pgxpoolConfig() {
	ctx := context.Background()
	cfg, err := pgreplicapgx.ParseConfig("postgres://app@db1,db2,db3/shop?sslmode=disable&pool_max_conns=20") // was pgxpool.ParseConfig
	if err != nil {
		log.Fatal(err)
	}
	cfg.ConnConfig.Tracer = &tracelog.TraceLog{
		Logger:   tracelog.LoggerFunc(func(_ context.Context, _ tracelog.LogLevel, msg string, data map[string]any) { log.Println(msg, data) }),
		LogLevel: tracelog.LogLevelInfo,
	}
	cfg.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
		cc.Password = os.Getenv("SHOP_DB_PASSWORD") // read again for every new connection: rotations apply
		return nil
	}
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		for _, name := range []string{"mood", "_mood"} { // an enum and its array
			t, err := c.LoadType(ctx, name)
			if err != nil {
				return err
			}
			c.TypeMap().RegisterType(t)
		}
		_, err := c.Exec(ctx, "SET statement_timeout = '5s'")
		return err
	}
	pool, err := pgreplicapgx.NewWithConfig(ctx, cfg) // was pgxpool.NewWithConfig
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	var moods []string
	if err := pool.QueryRow(ctx, "SELECT array_agg(mood) FROM people").Scan(&moods); err != nil {
		log.Fatal(err)
	}
	fmt.Println(moods)
}

// ParseConfig splits a DSN as pgxpool.ParseConfig does: the connection
// settings into ConnConfig, the pool's into their pgxpool fields, and
// pgreplica's own into Routing.
func ExampleParseConfig() {
	cfg, err := pgreplicapgx.ParseConfig("postgres://app@db1,db2:5433/shop?sslmode=disable&application_name=shop" +
		"&pool_max_conns=20&pgreplica_wait_budget=100ms")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(cfg.ConnConfig.User, cfg.ConnConfig.Database, cfg.ConnConfig.Host, cfg.ConnConfig.Fallbacks[0].Host,
		cfg.ConnConfig.RuntimeParams["application_name"])
	fmt.Println(cfg.MaxConns, len(cfg.Routing.Hosts), cfg.Routing.WaitBudget)
	_, err = pgreplicapgx.ParseConfig("postgres://app@db1,db2/shop?pool_min_conns=2")
	fmt.Println(errors.Is(err, pgreplica.ErrBadDSN))
	// Output:
	// app shop db1 db2 shop
	// 20 2 100ms
	// true
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
