package pgreplicaprom_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"net/http"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/pgreplicaprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Serve the metrics of a *sql.DB opened by driver name. ConnectorOf opens
// no connection; this example serves forever and does not run as a test.
func Example() {
	ctx := context.Background()
	db, err := sql.Open("pgreplica", "postgres://app@db1,db2,db3/shop?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	c, err := pgreplica.ConnectorOf(ctx, db)
	if err != nil {
		log.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(pgreplicaprom.NewCollector(c))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	log.Fatal(http.ListenAndServe(":9187", mux))
}

// A connector made with NewConnector can be registered before it has
// connected: the nodes show up with role "unknown" until probed.
func ExampleNewCollector() {
	c, err := pgreplica.NewConnector(pgreplica.Config{
		Hosts: []pgreplica.Host{{Addr: "db1", Zone: "a"}, {Addr: "db2", Zone: "b"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	db := sql.OpenDB(c)
	defer db.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(pgreplicaprom.NewCollector(c, pgreplicaprom.WithConstLabels(prometheus.Labels{"db": "shop"})))
	families, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range families {
		fmt.Println(f.GetName(), f.GetType(), len(f.GetMetric()))
	}
	// Output:
	// pgreplica_lsn_captures_total COUNTER 1
	// pgreplica_node_reads_eligible GAUGE 2
	// pgreplica_node_role GAUGE 2
	// pgreplica_node_up GAUGE 2
	// pgreplica_primary_visibility_waits_total COUNTER 1
	// pgreplica_read_conflicts_avoided_total COUNTER 1
	// pgreplica_read_fallbacks_peak GAUGE 1
	// pgreplica_read_fallbacks_rejected_total COUNTER 1
	// pgreplica_read_fallbacks_total COUNTER 3
	// pgreplica_read_hedges_total COUNTER 3
	// pgreplica_read_retries_total COUNTER 3
	// pgreplica_reads_failed_total COUNTER 2
	// pgreplica_reads_total COUNTER 4
	// pgreplica_replay_checks_total COUNTER 2
	// pgreplica_replica_wait_seconds HISTOGRAM 1
	// pgreplica_tokened_read_fallbacks_total COUNTER 1
	// pgreplica_tokened_reads_total COUNTER 1
}
