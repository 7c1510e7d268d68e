// Package pgreplicaoteltest runs pgreplicaotel's instruments against a
// real primary and two streaming replicas started by the integration
// harness: what a ManualReader collects after a workload (reads by kind,
// waits, a paused and lagging replica, a failed replica-only read), and
// that Unregister stops the reports. It has no code of its own, only
// tests; the unit tests that need no cluster stay in pgreplicaotel, which
// so does not require the harness.
package pgreplicaoteltest
