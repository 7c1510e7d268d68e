package pgreplica_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5"

	"github.com/pgreplica/pgreplica"
)

// pgx's hooks through database/sql, as pgx stdlib's OptionBeforeConnect
// and OptionAfterConnect (and pgxpool's PrepareConn, AfterRelease,
// BeforeClose) give them: every connection of the application's
// statements runs them, on the primary and on the replicas; the
// monitor's connections run BeforeConnect, so they log in after a
// password rotation too.
func ExamplePgxHooks() {
	cfg, err := pgreplica.ParseDSN("postgres://app@db1,db2,db3/shop?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	cfg.Pgx = &pgreplica.PgxHooks{
		BeforeConnect: func(_ context.Context, cc *pgx.ConnConfig) error {
			cc.Password = os.Getenv("SHOP_DB_PASSWORD") // read again for every new connection
			return nil
		},
		AfterConnect: func(ctx context.Context, c *pgx.Conn) error {
			_, err := c.Exec(ctx, "SET statement_timeout = '5s'")
			return err
		},
	}
	c, err := pgreplica.NewConnector(cfg)
	if err != nil {
		log.Fatal(err)
	}
	db := sql.OpenDB(c)
	defer db.Close()
	var timeout string
	if err := db.QueryRowContext(context.Background(), "SHOW statement_timeout").Scan(&timeout); err != nil {
		log.Fatal(err)
	}
	fmt.Println(timeout) // 5s, on whichever server answered
}

// A ConnConfig holds every connection's settings; the DSN's credentials
// and parameters then belong in it, not beside it.
func ExamplePgxHooks_connConfig() {
	cc, err := pgx.ParseConfig("user=app dbname=shop sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	cfg := pgreplica.Config{
		Hosts: []pgreplica.Host{{Addr: "db1"}, {Addr: "db2"}, {Addr: "db3"}},
		Pgx:   &pgreplica.PgxHooks{ConnConfig: cc},
	}
	_, err = pgreplica.NewConnector(cfg)
	fmt.Println(err)
	cfg.User = "app"
	_, err = pgreplica.NewConnector(cfg)
	fmt.Println(errors.Is(err, pgreplica.ErrBadConfig))
	// Output:
	// <nil>
	// true
}
