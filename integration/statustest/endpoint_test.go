package statustest

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica/integration"
)

// TestStatusShowsTheServersBehindAnEndpoint: given the primary and one
// HAProxy reader endpoint over both replicas, status lists the endpoint
// with the two servers behind it, by the port each listens on, in its
// table and in its JSON.
func TestStatusShowsTheServersBehindAnEndpoint(t *testing.T) {
	cluster.Need(t)
	ctx := testCtx(t, time.Minute)
	ep := cluster.ReaderEndpoint(t)
	dsn := integration.HostsDSN(fmt.Sprintf("127.0.0.1:%d", cluster.Port(cluster.Primary())), ep.Addr())
	var want []string
	for i := range cluster.Len() {
		if i != cluster.Primary() {
			want = append(want, fmt.Sprintf("127.0.0.1:%d", cluster.Port(i)))
		}
	}
	slices.Sort(want)

	by, raw := statusJSON(t, ctx, dsn)
	n, ok := by[ep.Addr()]
	if !ok {
		t.Fatalf("no row for the endpoint %s in:\n%s", ep.Addr(), raw)
	}
	var got []string
	for _, s := range n.Servers {
		got = append(got, s.Addr)
	}
	slices.Sort(got)
	if !n.Endpoint || !slices.Equal(got, want) {
		t.Fatalf("endpoint %v with servers %v, want true with %v:\n%s", n.Endpoint, got, want, raw)
	}

	var out, errOut bytes.Buffer
	if code := run(ctx, []string{"status", dsn}, &out, &errOut); code != exitOK {
		t.Fatalf("exit code %d; stderr:\n%s", code, errOut.String())
	}
	table := out.String()
	if !strings.Contains(table, "endpoint of 2 servers") {
		t.Errorf("the table does not call %s an endpoint:\n%s", ep.Addr(), table)
	}
	for _, s := range want {
		if !strings.Contains(table, "  "+s) || !strings.Contains(table, "behind "+ep.Addr()) {
			t.Errorf("the table does not list server %s behind %s:\n%s", s, ep.Addr(), table)
		}
	}
}
