// Package bench measures what pgreplica costs on top of its inner driver,
// on a real primary and two streaming replicas started by the integration
// harness. It holds only tests.
//
// Every operation (reads with each kind of requirement, autocommit
// INSERTs, read-only and read-write transactions) runs on two handles of
// the same inner driver, pgx or lib/pq: the driver alone through
// database/sql, connected straight to the node pgreplica would use
// (impl=direct), and pgreplica over that driver (impl=pgreplica).
//
//   - TestRoundTrips, which runs with the other tests, counts per
//     operation the client's round trips (through counting TCP proxies)
//     and the statements the servers ran (pg_stat_statements, when the
//     server ships it), and checks the promises of the design: no extra
//     round trip for reads without a Session, Exec writes and read-write
//     commits on pgx.
//   - BenchmarkPaired times both handles in alternation and reports the
//     ratio pgreplica/direct, the figure that stays readable on a shared
//     machine. The classic benchmarks (BenchmarkReadEventual, …) add
//     allocations and client CPU per operation; BenchmarkCaptureFloor
//     prices the LSN read with pgconn alone.
//   - BenchmarkWriteCapacity measures the primary's side of writes under
//     1, 4 and 16 concurrent writers: writes/s, statements and the
//     server's CPU time per write (pgreplica over pgx against plain pgx).
//   - BenchmarkWriteThenRead times a write followed at once by a read of
//     the row written, with the process default and with a Session;
//     BenchmarkFutileWait does the same with every replica 300 ms behind,
//     where waiting for a replica cannot succeed.
//
// The benchmarks only run with -bench:
//
//	go test -run '^$' -bench . -benchtime 1s -count 8 ./integration/bench > bench.txt
//	go run golang.org/x/perf/cmd/benchstat@latest -filter '.name:/^Paired/' bench.txt
//
// docs/performance.md gives the commands used for the published figures,
// the results and how to read them.
package bench
