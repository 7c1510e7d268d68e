package orm_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"

	"github.com/pgreplica/pgreplica"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
)

// Example_bun wires bun to a pgreplica *sql.DB with the PostgreSQL dialect.
// Every query takes its context in Exec or Scan.
func Example_bun() {
	db, err := sql.Open("pgreplica", "postgres://app@db1,db2,db3/shop?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	bdb := bun.NewDB(db, pgdialect.New())
	defer bdb.Close()

	ctx := pgreplica.WithSession(context.Background(), pgreplica.NewSession())

	it := bunItem{Name: "widget"}
	if _, err := bdb.NewInsert().Model(&it).Exec(ctx); err != nil { // INSERT … RETURNING "id"
		log.Fatal(err)
	}
	got := bunItem{ID: it.ID}
	if err := bdb.NewSelect().Model(&got).WherePK().Scan(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println(got.Name)

	// Read-only transactions go to a replica; RunInTx hands fn the ctx
	// to pass on.
	err = bdb.RunInTx(ctx, &sql.TxOptions{ReadOnly: true}, func(ctx context.Context, tx bun.Tx) error {
		var all []bunItem
		return tx.NewSelect().Model(&all).Order("id").Scan(ctx)
	})
	if err != nil {
		log.Fatal(err)
	}
}
