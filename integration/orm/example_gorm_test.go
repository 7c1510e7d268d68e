package orm_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"

	"github.com/pgreplica/pgreplica"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Example_gorm wires GORM to an existing pgreplica *sql.DB. Every call
// takes its context from WithContext.
func Example_gorm() {
	db, err := sql.Open("pgreplica", "postgres://app@db1,db2,db3/shop?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	gdb, err := gorm.Open(postgres.New(postgres.Config{Conn: db}), &gorm.Config{PrepareStmt: true})
	if err != nil {
		log.Fatal(err)
	}

	ctx := pgreplica.WithSession(context.Background(), pgreplica.NewSession())

	// Create runs INSERT … RETURNING "id" in GORM's default read-write
	// transaction, on the primary; its commit raises the session.
	it := gormItem{Name: "widget"}
	if err := gdb.WithContext(ctx).Create(&it).Error; err != nil {
		log.Fatal(err)
	}
	var got gormItem
	if err := gdb.WithContext(ctx).First(&got, it.ID).Error; err != nil {
		log.Fatal(err)
	}
	fmt.Println(got.Name)

	// A read that decides a write: lock and read in the same read-write
	// transaction, which runs on the primary.
	err = gdb.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var cur gormItem
		if err := tx.Clauses(clause.Locking{Strength: "UPDATE"}).First(&cur, it.ID).Error; err != nil {
			return err
		}
		return tx.Model(&cur).Update("name", cur.Name+" (sold)").Error
	})
	if err != nil {
		log.Fatal(err)
	}

	// A read-only transaction runs on one fresh replica.
	var all []gormItem
	err = gdb.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		return tx.Order("id").Find(&all).Error
	}, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		log.Fatal(err)
	}
}

// Example_gorm_driverName lets GORM open the *sql.DB itself, by driver name.
func Example_gorm_driverName() {
	gdb, err := gorm.Open(postgres.New(postgres.Config{
		DriverName: "pgreplica",
		DSN:        "postgres://app@db1,db2,db3/shop?sslmode=disable",
	}), &gorm.Config{})
	if err != nil {
		log.Fatal(err)
	}
	db, err := gdb.DB() // the pgreplica *sql.DB, for Close and for Stats
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	c, err := pgreplica.ConnectorOf(context.Background(), db)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(c.Stats().ReplicaReads)
}
