// Package topologytest checks pgreplica's topology monitor against a real
// PostgreSQL primary and streaming replicas started by the integration
// harness: lag in bytes and time, replica eligibility, the selection
// policies, zone preference, synchronous-standby exclusion, a replica kill
// and a failover with the old primary coming back beside the new one.
//
// It holds tests only. The non-destructive tests share one primary and two
// replicas; those that kill, stop or promote a node, or need another server
// configuration, start a cluster of their own. The tests report what they
// measure (lag distribution, failover detection time, re-admission time)
// with t.Log, so run them with -v to see the figures:
//
//	go test -race -v ./integration/topologytest/
//
// The idle-primary test watches the lag for 10 s; PGREPLICA_LONG=1 makes it
// the full minute of the issue.
package topologytest
