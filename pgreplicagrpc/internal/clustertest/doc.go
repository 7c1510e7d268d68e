// Package clustertest tests pgreplicagrpc's interceptors on a real
// cluster (a primary and two streaming replicas started by the integration
// harness): a token carried between two services over a real in-process
// gRPC server routes their reads to a replica that replayed the writes, or
// to the primary while every replica's replay is paused. It has no code of
// its own, only tests, which skip without PostgreSQL unless
// PGREPLICA_INTEGRATION=require.
package clustertest
