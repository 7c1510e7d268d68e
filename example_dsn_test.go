package pgreplica_test

import (
	"database/sql"
	"errors"
	"fmt"

	"github.com/pgreplica/pgreplica"
)

func ExampleParseDSN() {
	cfg, err := pgreplica.ParseDSN("postgres://app:secret@db1,db2:5433,[::1]/shop" +
		"?sslmode=disable&pgreplica_wait_budget=200ms&pgreplica_zones=eu-1a,eu-1b,local")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, h := range cfg.Hosts {
		fmt.Println(h.Addr, h.Port, h.Zone)
	}
	fmt.Println(cfg.User, cfg.Database, cfg.Params, cfg.WaitBudget)

	// The keyword/value form says the same.
	kv, _ := pgreplica.ParseDSN(`host=db1,db2,::1 port=5432,5433,5432 user=app password='secret' dbname=shop
		sslmode=disable pgreplica_wait_budget=200ms pgreplica_zones=eu-1a,eu-1b,local`)
	fmt.Println(kv.Hosts[1], kv.Password == cfg.Password)

	// pgreplica_* parameters are checked; errors name the option, never the password.
	_, err = pgreplica.ParseDSN("host=db1 password=secret pgreplica_wait_budgte=1s")
	fmt.Println(errors.Is(err, pgreplica.ErrUnknownOption))
	_, err = pgreplica.ParseDSN("host=db1 password=secret pgreplica_policy=fastest")
	fmt.Println(err)
	// Output:
	// db1 5432 eu-1a
	// db2 5433 eu-1b
	// ::1 5432 local
	// app shop map[sslmode:disable] 200ms
	// {db2 5433 eu-1b} true
	// true
	// pgreplica: malformed DSN: pgreplica_policy="fastest": want one of round_robin, random, least_lag, latency
}

// The servers of a Patroni cluster, listed by its REST API: the handle
// follows members added, removed or tagged noloadbalance.
func ExamplePatroniLookup() {
	cfg, err := pgreplica.ParseDSN("postgres://app@shop-cluster/shop?sslmode=disable")
	if err != nil {
		panic(err)
	}
	cfg.LookupFunc = pgreplica.PatroniLookup("shop-cluster", "http://pg1:8008", "http://pg2:8008")
	connector, err := pgreplica.NewConnector(cfg)
	if err != nil {
		panic(err)
	}
	db := sql.OpenDB(connector)
	defer db.Close()
}
