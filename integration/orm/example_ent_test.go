package orm_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration/orm/ent"
	"github.com/pgreplica/pgreplica/integration/orm/ent/item"
)

// Example_ent wires an ent client generated from ./ent/schema to a
// pgreplica *sql.DB. Every builder takes its context in Save, Exec, Only,
// All and the like.
func Example_ent() {
	db, err := sql.Open("pgreplica", "postgres://app@db1,db2,db3/shop?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	client := ent.NewClient(ent.Driver(entsql.OpenDB(dialect.Postgres, db)))
	defer client.Close()

	ctx := pgreplica.WithSession(context.Background(), pgreplica.NewSession())

	it, err := client.Item.Create().SetName("widget").Save(ctx) // INSERT … RETURNING "id"
	if err != nil {
		log.Fatal(err)
	}
	got, err := client.Item.Get(ctx, it.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(got.Name)

	// A read-only transaction runs on one fresh replica.
	tx, err := client.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	n, err := tx.Item.Query().Where(item.NameHasPrefix("w")).Count(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(n)
	tx.Commit()
}
