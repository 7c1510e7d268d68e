package pgreplica_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/pgreplica/pgreplica"
)

// Open a multi-host DSN: roles are discovered, writes go to the primary,
// provable reads to a replica that has every write this *sql.DB made.
func Example() {
	db, err := sql.Open("pgreplica", "postgres://app@db1,db2,db3/shop?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "UPDATE users SET name = $1 WHERE id = $2", "Ann", 7); err != nil {
		log.Fatal(err)
	}
	var name string
	// A replica that replayed the update, or the primary after the wait budget.
	if err := db.QueryRowContext(ctx, "SELECT name FROM users WHERE id = $1", 7).Scan(&name); err != nil {
		log.Fatal(err)
	}
	fmt.Println(name)
}

// Configure the driver in code and give the connector to sql.OpenDB.
func ExampleNewConnector() {
	c, err := pgreplica.NewConnector(pgreplica.Config{
		Hosts:      []pgreplica.Host{{Addr: "db1", Zone: "a"}, {Addr: "db2", Zone: "a"}, {Addr: "db3", Zone: "b"}},
		User:       "app",
		Database:   "shop",
		Params:     map[string]string{"sslmode": "disable"},
		Zone:       "b", // prefer replicas in our zone
		WaitBudget: 100 * time.Millisecond,
	})
	if err != nil {
		log.Fatal(err)
	}
	db := sql.OpenDB(c)
	defer db.Close() // closes the connector too: monitor and every connection
}

// Reach the connector behind a *sql.DB for its node status and counters.
func ExampleConnectorOf() {
	db, err := sql.Open("pgreplica", "postgres://app@db1,db2/shop")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	c, err := pgreplica.ConnectorOf(context.Background(), db)
	if err != nil {
		log.Fatal(err)
	}
	for _, n := range c.Nodes() {
		fmt.Println(n.Addr, n.Role, n.LagBytes, n.LagTime, n.Reads, n.Why)
	}
	s := c.Stats()
	fmt.Printf("replica reads %d, fallbacks %v, tokened fallback ratio %.3f, wait p95 %v\n",
		s.ReplicaReads, s.Fallbacks, s.TokenedFallbackRatio, s.Wait.P95)
}

// "Replica only": never load the primary; say why when no replica is fresh.
func ExampleWithFallback() {
	db, err := sql.Open("pgreplica", "postgres://app@db1,db2/shop")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ctx := pgreplica.WithFallback(context.Background(), pgreplica.FallbackError)
	var n int
	err = db.QueryRowContext(ctx, "SELECT count(*) FROM orders").Scan(&n)
	var nf *pgreplica.NoFreshReplicaError
	if errors.As(err, &nf) {
		fmt.Println("no fresh replica:", nf.Reason) // "timeout" or "no_replica"
	}
}
