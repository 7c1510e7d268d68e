package checker_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/pgreplica/pgreplica/integration"
	"github.com/pgreplica/pgreplica/integration/checker"
)

// A session wrote version 1 of its row (0,1) and read version 0 back: a
// read-your-writes violation.
func ExampleCheck() {
	t0 := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	h := checker.History{Ops: []checker.Op{
		{Session: 0, Seq: 0, Kind: checker.OpWrite, Role: "write", Path: "exec",
			Key: checker.Key{Owner: 0, N: 1}, Version: 1, Start: at(0), End: at(1), Node: -1},
		{Session: 0, Seq: 1, Kind: checker.OpRead, Role: "own-now", Path: "query",
			Key: checker.Key{Owner: 0, N: 1}, Version: 0, Start: at(2), End: at(3), Node: 2},
	}}
	for _, v := range checker.Check(h) {
		fmt.Printf("%s: read v%d on node %d after writing v%d\n", v.Kind, v.Read.Version, v.Read.Node, v.Cause.Version)
	}
	// Output:
	// read-your-writes: read v0 on node 2 after writing v1
}

// Run the workload through pgreplica on a cluster of one primary and two
// replicas started from the local PostgreSQL binaries.
func ExampleRun() {
	ctx := context.Background()
	cl, err := integration.Start(ctx, integration.Options{Replicas: 2})
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	rep, err := checker.Run(ctx, cl, checker.Options{Target: checker.TargetSession, Duration: 30 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	rep.WriteDetails(os.Stdout, 10)
	if err := checker.WriteTable(os.Stdout, rep); err != nil {
		log.Fatal(err)
	}
}
