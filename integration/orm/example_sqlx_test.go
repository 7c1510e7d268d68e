package orm_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"

	"github.com/jmoiron/sqlx"
	"github.com/pgreplica/pgreplica"
)

// Example_sqlx wraps a pgreplica *sql.DB for sqlx. sqlx picks the bind
// style (? or $1) from the driver name, and it does not know "pgreplica":
// naming "postgres" here gives Rebind and the Named* methods PostgreSQL's
// $1 placeholders.
func Example_sqlx() {
	db, err := sql.Open("pgreplica", "postgres://app@db1,db2,db3/shop?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	dbx := sqlx.NewDb(db, "postgres")
	defer dbx.Close()

	ctx := pgreplica.WithSession(context.Background(), pgreplica.NewSession())

	var id int64
	if err := dbx.GetContext(ctx, &id, dbx.Rebind("INSERT INTO items (name) VALUES (?) RETURNING id"), "widget"); err != nil {
		log.Fatal(err)
	}
	var it sqlxItem
	if err := dbx.GetContext(ctx, &it, "SELECT id, name FROM items WHERE id = $1", id); err != nil {
		log.Fatal(err)
	}
	fmt.Println(it.Name)

	// Read-only transactions go to a replica.
	tx, err := dbx.BeginTxx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	var all []sqlxItem
	if err := tx.SelectContext(ctx, &all, "SELECT id, name FROM items ORDER BY id"); err != nil {
		log.Fatal(err)
	}
	tx.Commit()
}

// Example_sqlx_bindDriver registers pgreplica's bind style with sqlx once,
// at start-up, so that sqlx.Open and sqlx.Connect work by name.
func Example_sqlx_bindDriver() {
	sqlx.BindDriver("pgreplica", sqlx.DOLLAR)
	dbx, err := sqlx.Open("pgreplica", "postgres://app@db1,db2,db3/shop?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	defer dbx.Close()
	fmt.Println(dbx.Rebind("SELECT name FROM items WHERE id = ?"))
}
