package orm_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"

	"github.com/pgreplica/pgreplica"
)

// Example_databaseSQL is the baseline every library below builds on: open
// by name, pass a context that carries the user's session to the *Context
// methods.
func Example_databaseSQL() {
	db, err := sql.Open("pgreplica", "postgres://app@db1,db2,db3/shop?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	// One session per user; the HTTP middleware attaches it to r.Context().
	ctx := pgreplica.WithSession(context.Background(), pgreplica.NewSession())

	var id int64
	// INSERT … RETURNING is a write: the primary runs it, and the session's
	// watermark rises to the commit's WAL position.
	err = db.QueryRowContext(ctx, "INSERT INTO items (name) VALUES ($1) RETURNING id", "widget").Scan(&id)
	if err != nil {
		log.Fatal(err)
	}
	var name string
	// A replica that has replayed the insert serves this; if none has
	// within the wait budget, the primary does.
	if err := db.QueryRowContext(ctx, "SELECT name FROM items WHERE id = $1", id).Scan(&name); err != nil {
		log.Fatal(err)
	}
	fmt.Println(name)

	// A read-only transaction runs on one fresh replica throughout.
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM items").Scan(&n); err != nil {
		log.Fatal(err)
	}
	tx.Commit()
}
