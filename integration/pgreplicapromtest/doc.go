// Package pgreplicapromtest runs pgreplicaprom's collector against a real
// primary and two streaming replicas started by the integration harness:
// the /metrics endpoint after a workload (reads by kind, waits, a paused
// and lagging replica, a failed replica-only read) and two connectors on
// one registry. It has no code of its own, only tests; the unit tests
// that need no cluster stay in pgreplicaprom, which so does not require
// the harness.
package pgreplicapromtest
