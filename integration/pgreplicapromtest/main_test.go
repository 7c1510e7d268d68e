package pgreplicapromtest

import (
	"os"
	"testing"

	"github.com/pgreplica/pgreplica/integration"
)

// cluster is one primary and two streaming replicas shared by the package.
var cluster *integration.Cluster

func TestMain(m *testing.M) {
	os.Exit(integration.Main(m, integration.Options{Replicas: 2}, &cluster))
}
