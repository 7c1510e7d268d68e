// Package pgreplicajobtest runs pgreplicajob's token hand-off from a
// producer to a worker against a real primary and two streaming replicas
// started by the integration harness. The unit tests that need no cluster
// stay in pgreplicajob.
package pgreplicajobtest
