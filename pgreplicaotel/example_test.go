package pgreplicaotel_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"slices"
	"strings"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/pgreplicaotel"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Report the metrics of a *sql.DB opened by driver name to the global
// MeterProvider. ConnectorOf opens no connection; this example still
// needs a cluster to serve and does not run as a test.
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
	reg, err := pgreplicaotel.Register(c, otel.GetMeterProvider(), pgreplicaotel.WithAttributes(attribute.String("db", "shop")))
	if err != nil {
		log.Fatal(err)
	}
	defer reg.Unregister()
	// ... serve the application; the configured exporter collects.
}

// A connector made with NewConnector can be registered before it has
// connected: the nodes show up with role "unknown" until probed.
func ExampleRegister() {
	c, err := pgreplica.NewConnector(pgreplica.Config{
		Hosts: []pgreplica.Host{{Addr: "db1", Zone: "a"}, {Addr: "db2", Zone: "b"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	db := sql.OpenDB(c)
	defer db.Close()

	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	reg, err := pgreplicaotel.Register(c, mp)
	if err != nil {
		log.Fatal(err)
	}
	defer reg.Unregister()

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		log.Fatal(err)
	}
	var names []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			names = append(names, strings.TrimSpace(m.Name+" "+m.Unit))
		}
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Println(n)
	}
	// Output:
	// pgreplica.lsn.captures {write}
	// pgreplica.node.reads_eligible
	// pgreplica.node.role
	// pgreplica.node.up
	// pgreplica.primary.visibility_waits {read}
	// pgreplica.read.conflicts_avoided {read}
	// pgreplica.read.failures {read}
	// pgreplica.read.fallbacks {read}
	// pgreplica.read.fallbacks.peak {read}
	// pgreplica.read.fallbacks.rejected {read}
	// pgreplica.read.hedges {read}
	// pgreplica.read.retries {retry}
	// pgreplica.reads {read}
	// pgreplica.replay_checks {check}
	// pgreplica.replica.wait.time s
	// pgreplica.tokened_read.fallbacks {read}
	// pgreplica.tokened_reads {read}
}
