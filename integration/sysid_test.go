package integration_test

import (
	"testing"

	"github.com/pgreplica/pgreplica/integration"
)

// TestClustersHaveTheirOwnSystemIdentifier: a cluster started from the
// initdb template of the process is a distinct cluster to PostgreSQL and to
// pgreplica (which keys positions by system identifier), as if it had run
// initdb; its replicas share its identifier.
func TestClustersHaveTheirOwnSystemIdentifier(t *testing.T) {
	cluster.Need(t)
	ctx := testCtx(t)
	second, err := integration.Start(ctx, integration.Options{Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	const q = "SELECT system_identifier::text FROM pg_control_system()"
	first, err := cluster.QueryString(ctx, cluster.Primary(), q)
	if err != nil {
		t.Fatal(err)
	}
	p, err := second.QueryString(ctx, second.Primary(), q)
	if err != nil {
		t.Fatal(err)
	}
	r, err := second.QueryString(ctx, 1, q)
	if err != nil {
		t.Fatal(err)
	}
	if p == first {
		t.Fatalf("two clusters share the system identifier %s", p)
	}
	if r != p {
		t.Fatalf("replica's system identifier %s differs from its primary's %s", r, p)
	}
}
