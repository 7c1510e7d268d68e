// Package tpcc runs go-tpc's TPC-C workload and its consistency check
// through pgreplica, as a real client of the driver: a workload written
// for lib/pq alone (its driver name "postgres"), opened through pgreplica
// with the same inner driver, on a cluster whose replicas apply 200 ms
// behind. Its module is apart so that go-tpc's dependencies stay out of
// the others.
package tpcc
