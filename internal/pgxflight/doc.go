// Package pgxflight runs a database/sql read over a pgx connection the
// way pgx's stdlib would run it, with a replay check in the same flight:
// the check and the query go as one pipeline under one Sync, so they run
// in one implicit transaction on one backend, which no proxy or
// transaction pooler splits, and the read costs the round trip it costs
// stdlib. The query goes as an unnamed statement whose parameters and
// result formats are chosen as stdlib chooses them from its description
// (Descriptions keeps those per connection), and its values come out as
// stdlib's (Rows). It needs no router: the root package chooses the
// connection, says which position the check must show, and reads the
// rows. Its tests run with `go test ./internal/pgxflight/`; the
// comparison with stdlib on a real server is
// integration/drivertest's TestFlightRowsMatchStdlib.
package pgxflight
